"""End to end against a real gateway (SQLite) started by the test: connect three ways, send and
receive verified messages, delegate to a worker, survive a gateway restart, refuse a tampered
copy, and surface AB-6002."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import sqlite3

import httpx

import pytest

import agentbus
from agentbus import Agent

from conftest import Gateway, s3_gateway_flags, s3_objects



def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


async def two_agents(gw: Gateway, tmp_path):
    a = await Agent.connect(gw.url, token=gw.admin, name="alpha", save_profile=True, home=tmp_path / "ha")
    b = await Agent.connect(gw.url, token=gw.admin, name="beta")
    return a, b


async def take(agent: Agent, n: int, **kw):
    got = []
    async for m in agent.messages(**kw):
        got.append(m)
        if len(got) == n:
            await m.ack()  # leaving the loop early: acked here, else it comes back after its lease
            break
    return got


def test_send_receive_verified_and_acked(gateway, tmp_path):
    async def body():
        a, b = await two_agents(gateway, tmp_path)
        sent = await a.send(b.address, "hello beta", subject="Greeting", expects_reply=True,
                            priority="high", idempotency_key="greet-1")
        assert sent.receipt["state"] == "persisted"
        again = await a.send(b.address, "hello beta", idempotency_key="greet-1")
        assert again.replay and again.id == sent.id
        [m] = await take(b, 1)
        assert m.verified and m.text == "hello beta" and m.subject == "Greeting"
        assert m.envelope["priority"] == "high"
        frame = agentbus.frame(m)
        assert frame.startswith(f'<agentbus-message id="{sent.id}" from="{a.address}"')
        assert ' verified="true"' in frame
        reply = await b.reply(m, "hi alpha")
        [r] = await take(a, 1, websocket=False)  # the long poll serves as well
        assert r.envelope["correlation_id"] == sent.id and r.verified
        assert r.envelope["conversation_id"] == sent.envelope["conversation_id"]
        assert reply.id == r.id
        states = await a.delivery(sent.id)
        assert json.dumps(states)  # a document with each recipient's state
        await a.close()
        await b.close()

    run(body())


def test_connect_from_the_profile_the_cli_saved(gateway, tmp_path):
    home = tmp_path / "cli"
    home.mkdir()
    gateway.cli(home, "connect", "--gateway", gateway.url, "--token", gateway.admin, "--name", "carol")

    async def body():
        carol = Agent.from_profile("carol", home=home)
        dave = await Agent.connect(gateway.url, token=gateway.admin, name="dave")
        await carol.send(dave.address, "from a CLI profile")
        [m] = await take(dave, 1)
        assert m.verified and m.source == carol.address
        # Explicit gateway, credential and key.
        same = await Agent.connect(gateway.url, credential=carol.credential, key=carol.key,
                                   key_id=carol.key_id, address=carol.address, agent_id=carol.agent_id)
        assert (await same.card())["address"] == carol.address
        for x in (carol, dave, same):
            await x.close()

    run(body())


def test_a_message_the_cli_sends_is_received_verified(gateway, tmp_path):
    home = tmp_path / "cli"
    home.mkdir()
    gateway.cli(home, "connect", "--gateway", gateway.url, "--token", gateway.admin, "--name", "erin")

    async def body():
        frank = await Agent.connect(gateway.url, token=gateway.admin, name="frank")
        await asyncio.to_thread(gateway.cli, home, "send", frank.address, "sent by the CLI")
        [m] = await take(frank, 1)
        assert m.verified and m.text == "sent by the CLI"
        await frank.close()

    run(body())


def test_delegate_to_a_worker_with_a_question_and_a_schema(gateway, tmp_path):
    async def body():
        req, wrk = await two_agents(gateway, tmp_path)
        worker = wrk.worker()

        @worker.capability("code.review", "1", output_schema={
            "type": "object", "required": ["verdict"],
            "properties": {"verdict": {"enum": ["approve", "reject"]}}})
        async def review(job):
            await job.progress(50, note="halfway")
            await job.error("flaky_linter", "the linter crashed once; retried", recoverable=True)
            answer = await job.ask("Which branch?", options=["main", "dev"])
            return agentbus.Result(output={"verdict": "approve", "branch": answer}, summary="looks good")

        @worker.capability("bad.output", "1", output_schema={"type": "object", "required": ["verdict"]})
        def bad(input):
            return {"nothing": True}

        stop = asyncio.Event()
        runner = asyncio.create_task(worker.run(stop=stop))
        await asyncio.sleep(0.5)  # the card is published
        task = await req.delegate(wrk.address, "code.review", "1", input={"diff": "+1"},
                                  instructions="Review this change.")
        # The requester answers the worker's question from its own inbox.
        async for m in req.messages():
            if m.type == "agentbus.task.needs_input.v1":
                assert m.verified
                await task.answer("dev")
                break
        result = await task.wait(timeout=30)
        assert result["state"] == "succeeded"
        assert result["output"] == {"verdict": "approve", "branch": "dev"}
        events = [e["type"] async for e in task.progress()]  # the timeline, ending with the task
        assert "agentbus.task.progress.v1" in events and "agentbus.task.needs_input.v1" in events
        assert "agentbus.task.error.v1" in events
        assert events[-1] == "agentbus.task.result.v1"

        bad_task = await req.delegate(wrk.address, "bad.output", "1", instructions="x")
        bad_result = await bad_task.wait(timeout=30)
        assert bad_result["state"] == "failed"
        assert bad_result["failure"]["code"] == "output_invalid"
        stop.set()
        runner.cancel()
        await req.close()
        await wrk.close()

    run(body())


def test_a_cancel_is_observed_by_the_worker(gateway, tmp_path):
    async def body():
        req, wrk = await two_agents(gateway, tmp_path)
        worker = wrk.worker()
        started = asyncio.Event()

        @worker.capability("slow.job", "1")
        async def slow(job):
            started.set()
            await asyncio.sleep(60)
            return "never"

        runner = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)
        task = await req.delegate(wrk.address, "slow.job", "1", instructions="wait")
        await asyncio.wait_for(started.wait(), 20)
        await task.cancel("changed my mind")
        for _ in range(100):
            if (task.id, "cancelled") in worker.finished:
                break
            await asyncio.sleep(0.1)
        assert (task.id, "cancelled") in worker.finished
        assert (await task.state())["state"] == "cancelled"
        runner.cancel()
        await req.close()
        await wrk.close()

    run(body())


def test_a_gateway_restart_mid_stream_loses_and_duplicates_nothing(gateway, tmp_path):
    async def body():
        a, b = await two_agents(gateway, tmp_path)
        for i in range(5):
            await a.send(b.address, f"before {i}")
        got = []

        async def receive():
            async for m in b.messages():
                got.append(m.text)
                if len(got) == 10:
                    return

        receiver = asyncio.create_task(receive())
        while len(got) < 5:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(gateway.stop)
        await asyncio.to_thread(gateway.start)
        for i in range(5):
            await a.send(b.address, f"after {i}")
        await asyncio.wait_for(receiver, 60)
        assert sorted(got) == sorted([f"before {i}" for i in range(5)] + [f"after {i}" for i in range(5)])
        await a.close()
        await b.close()

    run(body())


def _tamper(gw_dir, subject):
    """As someone with the gateway's disk would: the stored envelope whose subject is `subject`
    gets the subject `tampered`, so its signature no longer verifies."""
    con = sqlite3.connect(gw_dir / "agentbus.db", timeout=5)
    changed = con.execute(
        "UPDATE messages SET attrs = json_set(attrs, '$.subject', 'tampered') "
        "WHERE json_extract(attrs, '$.subject') = ?",
        (subject,),
    ).rowcount
    con.commit()
    con.close()
    return changed


def test_a_tampered_copy_is_unverified_and_held_back_when_required(gateway, tmp_path):
    async def body():
        a, b = await two_agents(gateway, tmp_path)
        await a.send(b.address, "pay invoice 12", subject="honest")
        assert _tamper(tmp_path / "gw", "honest") == 1
        b_open = Agent(gateway.url, b.credential, b.key, b.key_id, b.address, b.agent_id,
                       require_verified=False)
        [m] = await take(b_open, 1)
        assert m.subject == "tampered" and not m.verified
        assert m.why_unverified == "the signature does not verify"
        assert ' verified="false"' in m.frame()
        assert "did not verify (AB-1303)" in m.frame()
        # Under require_verified_inbound the handler never sees it: the next one it sees is clean.
        await a.send(b.address, "pay invoice 13", subject="honest")
        assert _tamper(tmp_path / "gw", "honest") == 1
        await a.send(b.address, "a clean one")
        b_strict = Agent(gateway.url, b.credential, b.key, b.key_id, b.address, b.agent_id,
                         require_verified=True)
        [m2] = await take(b_strict, 1)
        assert m2.text == "a clean one" and m2.verified
        for x in (a, b, b_open, b_strict):
            await x.close()

    run(body())


def test_ab_6002_surfaces_with_its_upgrade_hint(tmp_path):
    gw = Gateway(tmp_path, "--min-sidecar-version", "99.0.0")
    try:
        async def body():
            with pytest.raises(agentbus.SidecarTooOldError) as e:
                await Agent.connect(gw.url, token=gw.admin, name="old")
            assert e.value.code == "AB-6002"
            assert e.value.doc_url.endswith("/errors/AB-6002")
            assert "upgrade" in e.value.upgrade_hint

        run(body())
    finally:
        gw.stop()


def test_attachments_from_paths(gateway, tmp_path):
    async def body():
        a, b = await two_agents(gateway, tmp_path)
        f = tmp_path / "notes.txt"
        f.write_text("attached notes\n")
        await a.send(b.address, "see attached", attachments=[f])
        [m] = await take(b, 1)
        [att] = m.data["attachments"]
        assert att["name"] == "notes.txt" and att["size"] == len("attached notes\n")
        assert att["ref"].startswith("blob://")
        assert await b.download(att) == b"attached notes\n"  # the inline store: the gateway's URL
        await a.close()
        await b.close()

    run(body())


def test_sync_twin(gateway, tmp_path):
    from agentbus.sync import Agent as SyncAgent

    a = SyncAgent.connect(gateway.url, token=gateway.admin, name="sync-a")
    b = SyncAgent.connect(gateway.url, token=gateway.admin, name="sync-b")
    try:
        sent = a.send(b.address, "blocking hello")
        for m in b.messages():
            assert m.id == sent.id and m.verified
            break
    finally:
        a.close()
        b.close()


def test_a_redelivery_of_a_handled_message_is_acked_not_handed_over_again(tmp_path):
    # A short lease, so the gateway redelivers a copy whose ack was lost within the test.
    gw = Gateway(tmp_path, "--visibility-timeout", "1s")
    try:
        async def body():
            a, b = await two_agents(gw, tmp_path)
            await a.send(b.address, "once only")
            real_ack = b.ack
            lost = []

            async def lossy_ack(m):
                if not lost:
                    lost.append(m.id)  # the first ack never reaches the gateway
                    return
                await real_ack(m)

            b.ack = lossy_ack  # type: ignore[method-assign]
            handled = []
            await a.send(b.address, "second")

            async def receive():
                async for m in b.messages():
                    handled.append(m.text)
                    if len(handled) == 2:
                        await asyncio.sleep(3)  # the first copy's lease runs out meanwhile
                        await m.ack()
                        return

            await receive()
            await a.send(b.address, "third")
            [m3] = await take(b, 1)
            assert m3.text == "third"
            assert handled == ["once only", "second"] and lost
            await a.close()
            await b.close()

        run(body())
    finally:
        gw.stop()


class NoWebSocketProxy:
    """A loopback proxy in front of the gateway that refuses every WebSocket upgrade with 403, as
    some corporate proxies do, and passes everything else through unchanged."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.refused = 0
        self.polls = 0
        self.server: asyncio.AbstractServer | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        if b"upgrade: websocket" in head.lower():
            self.refused += 1
            writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()  # the gateway is down (restarting): the client sees a lost connection
            return
        up_w.write(head)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, count: bool) -> None:
            try:
                if count:
                    self.polls += head.startswith(b"GET /v1/inbox?")
                while data := await src.read(65536):
                    if count and b"GET /v1/inbox?" in data:
                        self.polls += 1
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_w, True), pipe(up_r, writer, False))
        except asyncio.CancelledError:
            pass

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


def test_the_long_poll_serves_when_websockets_are_refused_and_resumes_without_loss(gateway, tmp_path):
    """The receive loop falls back to the long poll when the socket's handshake is refused, and
    over it receives, acks after the body and resumes (a new loop, a gateway restart) with each
    message handed over exactly once."""

    async def body():
        proxy = NoWebSocketProxy(gateway.port)
        await proxy.start()
        a = await Agent.connect(gateway.url, token=gateway.admin, name="sender")
        b = await Agent.connect(proxy.url, token=gateway.admin, name="behind-proxy")
        assert b.gateway == proxy.url
        got: list[str] = []

        async def receive(n: int) -> None:
            async for m in b.messages():  # the default: the WebSocket first
                assert m.verified
                got.append(m.text)
                if len(got) == n:
                    await m.ack()
                    return

        sent_ids: list[str] = []
        for i in range(3):
            sent_ids.append((await a.send(b.address, f"first {i}")).id)
        await receive(2)
        assert proxy.refused >= 1 and proxy.polls >= 1
        assert b.inbox_transport == "long-poll"
        # A new loop resumes after the last sequence: "first 2" once, nothing handed over twice.
        for i in range(2):
            sent_ids.append((await a.send(b.address, f"second {i}")).id)
        await receive(5)
        # A gateway restart between long polls loses nothing either.
        receiver = asyncio.create_task(receive(8))
        await asyncio.to_thread(gateway.stop)
        await asyncio.to_thread(gateway.start)
        for i in range(3):
            sent_ids.append((await a.send(b.address, f"third {i}")).id)
        await asyncio.wait_for(receiver, 60)
        assert got == [f"first {i}" for i in range(3)] + [f"second {i}" for i in range(2)] + [
            f"third {i}" for i in range(3)
        ]
        # Every one was acked after its body: the sender sees each copy acknowledged.
        for sent_id in sent_ids:
            states = json.dumps(await a.delivery(sent_id))
            assert '"acknowledged"' in states and '"leased"' not in states, states
        await a.close()
        await b.close()
        await proxy.stop()

    run(body())


def test_attachments_stored_in_s3_arrive_byte_for_byte(tmp_path):
    """A gateway storing blobs in an S3-compatible store: the sender seals the file under the key
    the gateway hands out and PUTs it to the pre-signed URL; the store holds only ciphertext; the
    receiver downloads the sealed object, opens it and gets the same bytes."""
    flags = s3_gateway_flags(tmp_path)
    # An inline cap below the file's size: only the S3 path can take it.
    gw = Gateway(tmp_path, *flags, "--blob-inline-max", "1MiB")
    content = os.urandom(2 * 1024 * 1024 + 12345)  # three sealed pieces, the last a short one
    f = tmp_path / "build.tar"
    f.write_bytes(content)
    att_ref: list[str] = []
    try:
        async def body():
            a, b = await two_agents(gw, tmp_path)
            sent = await a.send(b.address, "the build", attachments=[f])
            [att] = sent.envelope["data"]["attachments"]
            att_ref.append(att["ref"])
            assert att["size"] == len(content)
            assert att["sha256"] == hashlib.sha256(content).hexdigest()
            [m] = await take(b, 1)
            assert m.verified and m.data["attachments"] == [att]
            got = await b.download(m.data["attachments"][0], to=tmp_path / "received.tar")
            assert got == content
            assert (tmp_path / "received.tar").read_bytes() == content
            assert await a.download(att["ref"]) == content  # the uploader reads it too
            # What the store holds, read through the pre-signed GET: ciphertext only.
            meta = await b._json("GET", f"/v1/blobs/{att['ref'].rsplit('/', 1)[-1]}")
            assert meta["download"]["sealing"]["scheme"] == "agentbus-chunked-v1"
            stored = httpx.get(meta["download"]["url"]).content
            assert len(stored) == len(content) + 3 * 16  # a tag per 1 MiB piece
            assert content[:4096] not in stored
            # A tampered declaration is caught before anything is returned.
            with pytest.raises(agentbus.AgentBusError) as e:
                await b.download({**att, "sha256": "0" * 64})
            assert e.value.code == "AB-3020"
            await a.close()
            await b.close()

        run(body())
        # The one object is in the bucket the gateway was given, under its prefix.
        assert [k for k in s3_objects(flags) if k.startswith("agentbus/blobs/")] == [
            "agentbus/blobs/" + att_ref[0].rsplit("/", 1)[-1]
        ]
    finally:
        gw.stop()


def test_a_keychain_profile_is_refused_with_a_command_that_gives_a_key_file(gateway, tmp_path):
    """The library reads key files only. A CLI profile whose key is in the OS keychain is refused
    with AB-1031 whose fix is an `agentbus connect` that gives the same agent a key file under a
    second profile; run as given, that profile connects."""
    home = tmp_path / "cli"
    home.mkdir()
    gateway.cli(home, "connect", "--gateway", gateway.url, "--token", gateway.admin, "--name", "keeper")
    # What `agentbus connect` writes when the keychain holds the key: the same profile with
    # "key_store": "keychain", and no key file.
    path = home / "profiles" / "keeper.json"
    doc = json.loads(path.read_text())
    (home / "keys" / f"{doc['agent_id']}.key").unlink()
    path.write_text(json.dumps({**doc, "key_store": "keychain"}, indent=2))

    with pytest.raises(agentbus.KeychainProfileError) as e:
        Agent.from_profile("keeper", home=home)
    err = e.value
    assert isinstance(err, agentbus.InputError)
    assert (err.code, err.kind, err.profile, err.file_profile) == ("AB-1031", "input", "keeper", "keeper-file")
    assert err.command == (
        f"AGENTBUS_KEYSTORE=file agentbus connect --gateway {gateway.url} --token <agent credential> "
        f"--agent {doc['agent_id']} --name keeper --profile keeper-file"
    )
    assert err.command in err.fix and f"\nfix: {err.fix}\n" in str(err)
    assert err.message == (
        f"profile 'keeper' keeps its key in the OS keychain (service agentbus, account "
        f"{doc['agent_id']}); this library reads key files only"
    )

    # The fix, run as it says (the credential from the profile).
    words = shlex.split(err.command.replace("<agent credential>", doc["token"]))
    assert words[:2] == ["AGENTBUS_KEYSTORE=file", "agentbus"]
    gateway.cli(home, *words[2:])

    async def body():
        same = await Agent.connect(profile="keeper-file", home=home)
        assert (same.agent_id, same.address) == (doc["agent_id"], doc["address"])
        other = await Agent.connect(gateway.url, token=gateway.admin, name="other")
        await same.send(other.address, "signed with the key file")
        [m] = await take(other, 1)
        assert m.verified and m.source == doc["address"]
        await same.close()
        await other.close()

    run(body())
