//! Console tests: a real gateway with its console on a loopback port, a real SQLite file, real
//! HTTP, and Debian's Chromium driven over WebDriver. Time is a `ManualClock`; live views are
//! awaited by their events, never by sleeping.

#![allow(clippy::unwrap_used)]

mod browser;
mod csrf;
mod fixture;
mod live;
mod pages;
mod scope;
mod session;
mod support;
