#!/bin/sh
touch EXECUTED
