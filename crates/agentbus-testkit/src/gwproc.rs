//! The real `agentbus gateway` process, started and stopped for black-box use: one helper for the
//! binary's tests and the benches that drive a gateway process, so neither keeps its own copy of
//! how to start, read and stop it. The caller names the binary (`env!("CARGO_BIN_EXE_agentbus")`
//! is known only inside the `agentbus` crate's own targets).
//! Everything here is blocking (std threads and sockets); an async caller starts the process
//! before its runtime needs it or from a blocking task.

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use agentbus_protocol::signing::SigningKey;
use agentbus_protocol::timestamp::Timestamp;

pub use crate::Agent;

/// Far above every bound a test sets: only a bound not enforced at all makes a caller wait it out.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A running `agentbus gateway` process, killed (SIGKILL) when dropped.
pub struct GwProc {
    child: Option<Child>,
    /// Its base URL (the bound port).
    pub url: String,
    /// `host:port` of the bound listener.
    pub addr: String,
    /// The first start's admin token (empty on later starts).
    pub admin: String,
    /// The first start's gateway operator token (empty on later starts): `/metrics`, tenants and
    /// the test clock.
    pub operator: String,
    /// The start-up document (`--json`).
    pub doc: Value,
    /// Its log lines, read as they come (so a full pipe never blocks the gateway); `None` when the
    /// caller sent stderr elsewhere.
    logs: Option<std::sync::mpsc::Receiver<String>>,
}

/// `BIN [--json] gateway --listen 127.0.0.1:0 --data DIR …` with its output piped and no
/// `AGENTBUS_*` variable of the machine running it. Callers may change it before
/// [`GwProc::start_cmd`] (another `RUST_LOG`, stderr to a file).
pub fn gateway_command(bin: impl AsRef<OsStr>, json: bool, dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(bin);
    if json {
        c.arg("--json");
    }
    c.args(["gateway", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("AGENTBUS_") {
            c.env_remove(k);
        }
    }
    c
}

impl GwProc {
    /// Starts the gateway `bin` on `dir` (with `--json`) and reads its start-up document.
    pub fn start(bin: impl AsRef<OsStr>, dir: &Path, extra: &[&str]) -> GwProc {
        GwProc::start_cmd(gateway_command(bin, true, dir, extra))
    }

    /// Spawns `cmd` (a `--json` gateway command) and reads its start-up document: the process
    /// prints it once the store is open, before it serves.
    pub fn start_cmd(mut cmd: Command) -> GwProc {
        let mut child = cmd.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let doc: Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("no start-up document: {line:?}\n{err}")
        });
        // Anything printed later is drained so the pipe never fills.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        let logs = child.stderr.take().map(|err| {
            let (tx, logs) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            logs
        });
        let addr = doc["listening"].as_str().unwrap_or_default().to_owned();
        let url = doc["url"]
            .as_str()
            .map_or_else(|| format!("http://{addr}"), str::to_owned);
        GwProc {
            url,
            addr,
            admin: doc["admin_token"].as_str().unwrap_or_default().to_owned(),
            operator: doc["operator_token"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            child: Some(child),
            doc,
            logs,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends `signal` (`TERM`, `INT`, …) without waiting.
    pub fn signal(&self, signal: &str) {
        signal_pid(self.pid(), signal);
    }

    /// Sends `signal` (`TERM`, `INT`) and waits for the exit.
    pub fn stop(self, signal: &str) -> ExitStatus {
        self.signal(signal);
        self.wait_exit()
    }

    /// SIGKILL: the process gets no chance to finish anything; answers once it is gone.
    pub fn kill9(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap()
    }

    /// Waits (up to [`PATIENCE`]) for the process to exit by itself or by a signal already sent.
    pub fn wait_exit(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the gateway did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal`, waits for the exit and answers every log line not yet read (the whole log
    /// when nothing read it before).
    pub fn stop_with_logs(mut self, signal: &str) -> (ExitStatus, Vec<String>) {
        let logs = self.logs.take().expect("the gateway's stderr is not piped");
        self.signal(signal);
        let status = self.wait_exit();
        // The reader thread ends at the pipe's end, which closes the channel.
        let lines = std::iter::from_fn(|| logs.recv_timeout(PATIENCE).ok()).collect();
        (status, lines)
    }

    /// Reads the log until a line contains `what`.
    pub fn wait_for_log(&self, what: &str) {
        let logs = self
            .logs
            .as_ref()
            .expect("the gateway's stderr is not piped");
        loop {
            let line = logs
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no log line with {what:?}"));
            if line.contains(what) {
                return;
            }
        }
    }
}

/// The test clock of a gateway started with `--unsafe-test-clock`.
impl GwProc {
    /// Moves the test clock forward (then the gateway runs one reaper pass).
    pub fn advance(&self, by: &str) -> Value {
        let (s, v) = http(
            &self.url,
            "POST",
            "/v1/test/clock",
            &self.operator,
            Some(&json!({"advance": by})),
        );
        assert_eq!(s, 200, "{v}");
        v
    }

    /// The gateway's time, in Unix milliseconds (the test clock's when it runs on one).
    pub fn now_ms(&self) -> i64 {
        let (_, _, head) = request(&self.url, "GET", "/healthz", "", None);
        match header(&head, "agentbus-test-clock") {
            Some(t) => t.parse::<Timestamp>().unwrap().millis(),
            None => agentbus_runtime::Clock::now(&agentbus_runtime::SystemClock).millis(),
        }
    }
}

impl Drop for GwProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `kill -SIGNAL PID`.
pub fn signal_pid(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {pid}");
}

/// One keep-alive HTTP/1.1 connection to a gateway, with a read timeout so a caller never hangs
/// on a process that has gone.
pub struct Conn {
    r: BufReader<std::net::TcpStream>,
    host: String,
}

impl Conn {
    /// Connects to `addr` (`host:port`).
    pub fn open(addr: &str) -> std::io::Result<Conn> {
        let s = std::net::TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(PATIENCE))?;
        Ok(Conn {
            r: BufReader::new(s),
            host: addr.to_owned(),
        })
    }

    /// One request with a JSON body (empty for none): the status and the body.
    pub fn call(
        &mut self,
        method: &str,
        path: &str,
        token: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if !token.is_empty() {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ));
        let s = self.r.get_mut();
        s.write_all(head.as_bytes())?;
        s.write_all(body)?;
        let (mut status, mut length, mut line) = (0, 0usize, String::new());
        loop {
            line.clear();
            if self.r.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let l = line.trim_end().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            if let Some(rest) = l.strip_prefix("http/1.1 ") {
                status = rest.get(..3).and_then(|s| s.parse().ok()).unwrap_or(0);
            } else if let Some(n) = l.strip_prefix("content-length: ") {
                length = n.parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        self.r.read_exact(&mut body)?;
        Ok((status, body))
    }
}

/// One HTTP/1.1 exchange on its own connection: status, body bytes, head (lower-cased).
pub fn request(
    url: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<(&str, &[u8])>,
) -> (u16, Vec<u8>, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if !token.is_empty() {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let (ct, bytes) = body.unwrap_or(("application/json", b""));
    head.push_str(&format!(
        "Content-Type: {ct}\r\nContent-Length: {}\r\n\r\n",
        bytes.len()
    ));
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(bytes).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, raw[split + 4..].to_vec(), head)
}

/// A header of a lower-cased head.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .map(str::trim)
}

/// A JSON exchange on its own connection: the status and the body (`null` when not JSON).
pub fn http(
    url: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let text = body.map(Value::to_string);
    let (s, b, _) = request(
        url,
        method,
        path,
        token,
        text.as_deref().map(|t| ("application/json", t.as_bytes())),
    );
    (s, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

/// Registers the agent `name` with the first start's admin token.
pub fn register(gw: &GwProc, name: &str) -> Agent {
    register_with(gw, name, json!({}))
}

/// Registers the agent `name` with the first start's admin token and `extra` card fields.
pub fn register_with(gw: &GwProc, name: &str, extra: Value) -> Agent {
    let key = SigningKey::from_seed(agentbus_runtime::random_bytes());
    let mut body = json!({"name": name, "public_key": key.public().to_base64url()});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let (s, v) = http(&gw.url, "POST", "/v1/agents", &gw.admin, Some(&body));
    assert_eq!(s, 201, "{v}");
    Agent::from_registration(&v, key)
}

/// A signed message.v1 from `from` to the address `to`, stamped `now_ms`, with `extra` attributes.
pub fn envelope_at(
    from: &Agent,
    to: &str,
    id: &str,
    text: &str,
    now_ms: i64,
    extra: Value,
) -> Map<String, Value> {
    let mut env = crate::envelope::message(&from.address, to, text, Timestamp(now_ms));
    env.insert("id".into(), json!(id));
    for (k, v) in extra.as_object().unwrap() {
        env.insert(k.clone(), v.clone());
    }
    crate::envelope::sign(from, env)
}
