//! The console in a real browser: Debian's Chromium, headless, driven over
//! WebDriver by `chromedriver` through fantoccini. One browser session walks it all: sign-in, a
//! conversation, a task's timeline followed live while its worker reports progress, the admin's
//! cancel and the state change it brings, a CSRF attempt, a workspace admin at another
//! workspace's pages, and the XSS corpus of `tests/data/xss.json` in every field the issue lists.
//! A hook installed in every document before any of its scripts fails the test on any alert,
//! confirm, prompt or print, any Content-Security-Policy violation, and any element a payload
//! would have injected. Screenshots of each page go to `target/console-screenshots/`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Runs in every document before its own scripts. Anything that executes where only the
/// console's own script should is recorded; `__xssReport()` also scans the DOM for markup a
/// payload would have injected (the CSP blocks inline script, so escaping is checked apart from it).
const HOOK: &str = r#"
(() => {
  const hits = [];
  const record = (what) => hits.push(what);
  for (const name of ["alert", "confirm", "prompt", "print"]) {
    window[name] = (...args) => { record(name + "(" + args.map(String).join(",") + ")"); };
  }
  document.addEventListener("securitypolicyviolation", (e) => {
    record("csp " + e.violatedDirective + " " + (e.blockedURI || "") + " " + (e.sample || ""));
  });
  window.__xssReport = () => {
    const found = hits.slice();
    for (const el of document.querySelectorAll("*")) {
      const tag = el.tagName.toUpperCase();
      for (const a of el.attributes) {
        const n = a.name.toLowerCase();
        const v = a.value.replace(/[\s\u0000-\u001f]/g, "").toLowerCase();
        if (n.startsWith("on")) found.push("handler " + tag + " " + n);
        if (["href", "src", "action", "formaction", "data", "xlink:href", "background", "poster"].includes(n)
            && (v.startsWith("javascript:") || v.startsWith("data:text/html"))) found.push("url " + tag + " " + n);
        if (n === "srcdoc") found.push("srcdoc " + tag);
        if (n === "style" ) found.push("inline style " + tag);
      }
      if (tag === "SCRIPT" && !(el.getAttribute("src") || "").startsWith("/console/assets/")) found.push("script");
      if (["IFRAME", "FRAME", "OBJECT", "EMBED", "BASE", "LINK", "STYLE"].includes(tag)
          && !(tag === "LINK" && (el.getAttribute("href") || "").startsWith("/console/assets/"))) found.push("element " + tag);
      if (tag === "META" && el.hasAttribute("http-equiv")) found.push("meta http-equiv");
    }
    return found;
  };
})();
"#;

/// The widths every page is checked and photographed at, px.
const WIDTHS: [u32; 2] = [1400, 800];

/// The badges, ids and address parts of the page laid out on more than one line (each line of
/// an element's text is a distinct top among its text's client rects), and any address part not
/// ending in a slash but its last, so a break between parts is always after a slash.
const UNBROKEN: &str = r#"
const lines = (el) => {
  const r = document.createRange();
  r.selectNodeContents(el);
  return new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top))).size;
};
const found = [];
for (const el of document.querySelectorAll(".state, .badge, .id, .tag.kind, .addr .seg")) {
  if (lines(el) > 1) found.push(el.className + " " + el.textContent);
}
for (const a of document.querySelectorAll(".addr")) {
  const parts = [...a.querySelectorAll(".seg")];
  parts.slice(0, -1).forEach((p) => { if (!p.textContent.endsWith("/")) found.push("part " + p.textContent); });
}
return found;
"#;

/// `POST /session/{id}/goog/cdp/execute`: chromedriver's door to the DevTools protocol.
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: Value,
}

impl WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base: &reqwest::Url,
        session: Option<&str>,
    ) -> Result<reqwest::Url, url::ParseError> {
        base.join(&format!(
            "session/{}/goog/cdp/execute",
            session.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &reqwest::Url) -> (axum::http::Method, Option<String>) {
        (
            axum::http::Method::POST,
            Some(json!({"cmd": self.cmd, "params": self.params}).to_string()),
        )
    }
}

/// A chromedriver we started, with its browser session. The driver runs in its own process
/// group, which is ended as a whole when this is dropped, so no Chromium outlives the test.
struct Browser {
    c: Client,
    driver: Child,
    shots: PathBuf,
    pages: usize,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Browser {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(bin).exists(),
                "{bin} is missing: ./scripts/test installs Debian's chromium and chromium-driver with apt-get"
            );
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut cmd = Command::new(CHROMEDRIVER);
        cmd.arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let driver = cmd.spawn().unwrap();
        // Ready once it accepts connections.
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1360,960",
            "--force-device-scale-factor=1",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        });
        let c = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps.as_object().unwrap().clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap();
        c.issue_cmd(Cdp {
            cmd: "Page.addScriptToEvaluateOnNewDocument",
            params: json!({"source": HOOK}),
        })
        .await
        .unwrap();
        let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap()
            .join("console-screenshots");
        std::fs::create_dir_all(&shots).unwrap();
        Browser {
            c,
            driver,
            shots,
            pages: 0,
            _profile: profile,
        }
    }

    /// Opens `url` and checks the page ran nothing it should not.
    async fn open(&mut self, url: &str) {
        self.c.goto(url).await.unwrap();
        self.check(url).await;
    }

    /// Fails on anything the hook recorded or found in the page.
    async fn check(&mut self, what: &str) {
        let found = self
            .c
            .execute(
                "return window.__xssReport ? window.__xssReport() : ['the hook is not installed'];",
                vec![],
            )
            .await
            .unwrap();
        let found: Vec<String> = serde_json::from_value(found).unwrap();
        assert!(found.is_empty(), "{what}: {found:?}");
        self.pages += 1;
    }

    async fn text(&self) -> String {
        self.c
            .find(Locator::Css("body"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        match self
            .c
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(css))
            .await
        {
            Ok(e) => e,
            Err(e) => {
                let url = self
                    .c
                    .current_url()
                    .await
                    .map(|u| u.to_string())
                    .unwrap_or_default();
                panic!("{css}: {e} at {url}: {}", self.text().await)
            }
        }
    }

    /// Waits until the element at `css` reads `want`, as the live stream updates it.
    async fn wait_text(&self, css: &str, want: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(e) = self.c.find(Locator::Css(css)).await
                && e.text().await.is_ok_and(|t| t.trim() == want)
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{css} never read {want:?}: {}",
                self.text().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn shot(&self, name: &str) {
        let png = self.c.screenshot().await.unwrap();
        std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap();
    }

    /// At each width the console is checked at: no badge, id or address part of the page is
    /// broken across lines (an address breaks only between its parts, after a slash), and a
    /// screenshot `{name}-{width}.png`. The window is left at the widest.
    async fn at_widths(&self, name: &str) {
        for width in WIDTHS {
            self.c.set_window_size(width, 960).await.unwrap();
            let broken = self.c.execute(UNBROKEN, vec![]).await.unwrap();
            let broken: Vec<String> = serde_json::from_value(broken).unwrap();
            assert!(
                broken.is_empty(),
                "{name} at {width} px breaks a word across lines: {broken:?}"
            );
            self.shot(&format!("{name}-{width}")).await;
        }
        self.c.set_window_size(WIDTHS[0], 960).await.unwrap();
    }

    async fn sign_in(&mut self, base: &str, token: &str) {
        self.open(&format!("{base}/console/")).await;
        let field = self.wait_for("#token").await;
        field.send_keys(token).await.unwrap();
        self.c
            .find(Locator::Css("form button[type=submit]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        self.wait_for("#overview-live").await;
        self.check("after sign-in").await;
    }

    async fn sign_out(&mut self) {
        self.c
            .find(Locator::Css("header form button"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        self.wait_for("#token").await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg("--")
            .arg(format!("-{}", self.driver.id()))
            .status();
        let _ = self.driver.wait();
    }
}

/// A tour of a small fleet: what the screenshots show.
struct Tour {
    requester: Agent,
    worker: Agent,
    conversation: String,
    live_task: String,
    live_request: serde_json::Map<String, Value>,
    ws_admin: String,
    other_ws_admin: String,
    ci_address: String,
}

async fn tour(w: &World) -> Tour {
    let admin = &w.admin;
    w.workspace(admin, "backend").await;
    w.workspace(admin, "frontend").await;
    let ws_admin = w.user(admin, "admin", "backend").await;
    let other_ws_admin = w.user(admin, "admin", "frontend").await;
    let card = |display: &str, description: &str, caps: Value| {
        json!({"workspace": "backend", "display_name": display, "description": description, "capabilities": caps,
               "tags": ["ci", "release"], "harness": {"name": "claude-code", "version": "2.4"}})
    };
    let review = json!([{"name": "code.review", "version": "1", "description": "Review a diff for bugs and style.",
                         "input_schema": {"type": "object", "properties": {"pr": {"type": "integer"}}}}]);
    let requester = w
        .agent(
            admin,
            "release-bot",
            card(
                "Release bot",
                "Cuts releases and asks for reviews.",
                json!([]),
            ),
        )
        .await;
    let worker = w
        .agent(
            admin,
            "reviewer",
            card("Reviewer", "Reviews pull requests.", review.clone()),
        )
        .await;
    let docs = w
        .agent(
            admin,
            "docs-writer",
            card("Docs writer", "Keeps docs/ true.", review),
        )
        .await;
    let ci = w
        .agent(
            admin,
            "ci-runner",
            card("CI runner", "Runs the test suite.", json!([])),
        )
        .await;
    // A message the CI runner never acknowledges: dead-lettered after its attempts, before any
    // task's clock starts.
    let lost = w.draft(
        &requester,
        &ci.address,
        "message",
        json!({"text": "Nightly run?"}),
    );
    w.send(&requester, lost).await;
    for _ in 0..3 {
        let (s, v) = w
            .api(
                Method::GET,
                "/v1/inbox?after=0&wait=0&limit=100",
                &ci.token,
                None,
            )
            .await;
        assert_eq!(s, 200, "{v}");
        w.clock.advance_secs(31);
    }
    w.app.reap().await.unwrap();
    // A conversation: a question with a patch attached, delivered, answered.
    let patch = w
        .upload(
            &requester,
            "release-0.4.patch",
            "text/x-diff",
            b"--- a/Cargo.toml\n+++ b/Cargo.toml\n",
        )
        .await;
    let mut first = w.draft(&requester, &worker.address, "message",
        json!({"text": "Release 0.4 is cut. Could you look at the patch before I tag it?\nThe changelog is in the PR.", "attachments": [patch], "expects_reply": true}));
    first.insert("subject".into(), json!("Release 0.4 review"));
    let conversation = first["conversation_id"].as_str().unwrap().to_owned();
    let first_id = first["id"].clone();
    w.send(&requester, first).await;
    w.receive_all(&worker).await;
    let mut reply = w.draft(
        &worker,
        &requester.address,
        "message",
        json!({"text": "On it. One question about the MSRV bump, otherwise it looks good."}),
    );
    reply["conversation_id"] = json!(conversation);
    reply.insert("correlation_id".into(), first_id);
    w.send(&worker, reply).await;
    w.receive_all(&requester).await;
    let mut more = w.draft(
        &requester,
        &worker.address,
        "message",
        json!({"text": "MSRV stays at 1.95; the bump was a typo."}),
    );
    more["conversation_id"] = json!(conversation);
    w.send(&requester, more).await;
    // Tasks in several states, with usage and cost.
    let (req, done) = w.request(&requester, &docs, json!({"instructions": "Update docs/api.md for /v1/usage.", "constraints": {"accept_timeout_s": 600}})).await;
    w.followup(
        &docs,
        &requester,
        &req,
        &done,
        "accept",
        json!({"note": "Starting."}),
    )
    .await;
    w.followup(&docs, &requester, &req, &done, "result", json!({"status": "succeeded", "summary": "docs/api.md updated.",
        "usage": {"reported_by": "harness", "provider": "anthropic", "model": "claude-opus-5-5", "input_tokens": 61200, "output_tokens": 3100, "cache_read_tokens": 40000},
        "cost": {"currency": "USD", "amount": "0.42", "source": "proxy"}})).await;
    let (req2, failed) = w.request(&ci, &worker, json!({"instructions": "Review the flaky test fix.", "constraints": {"accept_timeout_s": 600}})).await;
    w.followup(
        &worker,
        &ci,
        &req2,
        &failed,
        "result",
        json!({"status": "rejected", "rejection_reason": "busy"}),
    )
    .await;
    w.request(
        &requester,
        &docs,
        json!({"instructions": "Draft the 0.4 announcement."}),
    )
    .await;
    // A task that failed, and one waiting for its requester's answer: what needs attention.
    let (req3, broken) = w.request(&requester, &worker, json!({"instructions": "Run the release checklist.", "constraints": {"accept_timeout_s": 3600}})).await;
    w.followup(&worker, &requester, &req3, &broken, "accept", json!({}))
        .await;
    w.followup(&worker, &requester, &req3, &broken, "result",
        json!({"status": "failed", "failure": {"code": "harness_crashed", "message": "exit status: 3"}})).await;
    let (req4, asking) = w.request(&requester, &docs, json!({"instructions": "Write the migration guide.", "constraints": {"accept_timeout_s": 3600}})).await;
    w.followup(&docs, &requester, &req4, &asking, "accept", json!({}))
        .await;
    w.followup(
        &docs,
        &requester,
        &req4,
        &asking,
        "needs_input",
        json!({"question": "Which versions does it cover?"}),
    )
    .await;
    let mut budgeted = w.draft(&requester, &worker.address, "task.request",
        json!({"instructions": "Review change 482 for concurrency bugs.", "constraints": {"accept_timeout_s": 600, "progress_timeout_s": 900, "max_duration_s": 3600}}));
    budgeted.insert("capability".into(), json!("code.review"));
    budgeted.insert("capability_version".into(), json!("1"));
    budgeted.insert("budget".into(), json!({"currency": "USD", "max": "2.00"}));
    let receipt = w.send(&requester, budgeted.clone()).await;
    let live_task = receipt["task_id"].as_str().unwrap().to_owned();
    w.followup(
        &worker,
        &requester,
        &budgeted,
        &live_task,
        "accept",
        json!({"note": "Looking at it now.", "estimated_duration_s": 600}),
    )
    .await;
    w.followup(&worker, &requester, &budgeted, &live_task, "progress", json!({"percent": 20, "stage": "reading", "note": "Read the diff.",
        "usage_delta": {"reported_by": "harness", "provider": "anthropic", "model": "claude-opus-5-5", "input_tokens": 8120, "output_tokens": 240}})).await;
    // A topic with subscribers; a refused publish for the overview's codes.
    for a in [&worker, &docs] {
        assert_eq!(
            w.api(
                Method::PUT,
                "/v1/topics/deploys/subscription",
                &a.token,
                None
            )
            .await
            .0,
            200
        );
    }
    let mut bad = sign(
        &ci,
        w.draft(&ci, &worker.address, "message", json!({"text": "tampered"})),
    );
    bad["data"]["text"] = json!("changed after signing");
    assert_eq!(
        w.api(
            Method::POST,
            "/v1/messages",
            &ci.token,
            Some(Value::Object(bad))
        )
        .await
        .0,
        401
    );
    Tour {
        requester,
        worker,
        conversation,
        live_task,
        live_request: budgeted,
        ws_admin,
        other_ws_admin,
        ci_address: ci.address.clone(),
    }
}

/// Where each payload goes, and what refused it.
struct Corpus {
    payloads: Vec<String>,
    agents: Vec<String>,
    conversation: String,
    task: String,
}

fn payloads() -> Vec<String> {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/xss.json"))
            .unwrap(),
    )
    .unwrap();
    doc["payloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

async fn corpus(w: &World, admin: &str) -> Corpus {
    let payloads = payloads();
    assert!(payloads.len() >= 30);
    let mut agents = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        let a = w
            .agent(
                admin,
                &format!("x{i:02}"),
                json!({"display_name": p, "description": p, "tags": [p, "xss"],
                "capabilities": [{"name": "code.review", "version": "1", "description": p}],
                "harness": {"name": p}, "status": {"note": p}}),
            )
            .await;
        agents.push(a);
    }
    let (from, to) = (&agents[0], &agents[1]);
    let cnv = agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Conversation).to_string();
    let mut named = 0;
    for p in &payloads {
        let mut data = json!({"text": p});
        if !p.contains(['/', '\\']) {
            data["attachments"] = json!([w.upload(from, p, "text/html", p.as_bytes()).await]);
            named += 1;
        }
        let mut env = w.draft(from, &to.address, "message", data);
        env["conversation_id"] = json!(cnv);
        env.insert("subject".into(), json!(p));
        w.send(from, env).await;
    }
    assert!(named >= 30, "attachment names in the corpus: {named}");
    let (req, task) = w
        .request(from, to, json!({"instructions": payloads.join("\n")}))
        .await;
    w.followup(
        to,
        from,
        &req,
        &task,
        "accept",
        json!({"note": payloads[0]}),
    )
    .await;
    for p in &payloads {
        let stage: String = p.chars().take(100).collect();
        w.followup(
            to,
            from,
            &req,
            &task,
            "progress",
            json!({"stage": stage, "note": p,
            "usage_delta": {"reported_by": "agent", "provider": p, "model": p, "input_tokens": 1}}),
        )
        .await;
    }
    let rules: Vec<Value> = payloads
        .iter()
        .map(|p| json!({"from": "*", "to": "*", "effect": "allow", "description": p}))
        .collect();
    let ws = w.api(Method::GET, "/v1/workspaces", admin, None).await.1["workspaces"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, v) = w
        .api(
            Method::PUT,
            &format!("/v1/workspaces/{ws}/policy"),
            admin,
            Some(json!({"default": "allow", "rules": rules})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    Corpus {
        payloads,
        agents: agents.iter().map(|a| a.id.clone()).collect(),
        conversation: cnv,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_chromium() {
    let w = World::start().await;
    let t = tour(&w).await;
    let xss_admin = w.tenant("xss").await;
    let corpus = corpus(&w, &xss_admin).await;
    let base = w.url.clone();
    let mut b = Browser::start().await;

    // Sign in, as a person would: the form, then the overview.
    b.open(&format!("{base}/console/sign-in")).await;
    b.shot("sign-in").await;
    b.sign_in(&base, &t.ws_admin).await;
    b.wait_for("#counters").await;
    // The publishes chart starts from the recent history, on the first load.
    let bars =
        b.c.execute(
            "return document.querySelectorAll('figure.chart:first-child rect').length;",
            vec![],
        )
        .await
        .unwrap();
    assert!(bars.as_u64().unwrap() > 0, "no bars on the first load");
    b.at_widths("overview").await;
    b.open(&format!("{base}/console/agents")).await;
    b.at_widths("agents").await;
    b.open(&format!("{base}/console/agents/{}", t.worker.id))
        .await;
    let agent = b.text().await;
    // The card rendered, never dumped: harness, capabilities, presence; its recent work.
    for want in [
        "name claude-code version 2.4",
        "code.review v1 Review a diff for bugs and style.",
        "last heard",
        "Recent tasks",
        "Review change 482 for concurrency bugs.",
        "Recent conversations",
        "MSRV stays at 1.95; the bump was a typo.",
    ] {
        assert!(agent.contains(want), "{want}: {agent}");
    }
    assert!(!agent.contains('{'), "no JSON on the agent's page: {agent}");
    b.at_widths("agent").await;

    // A conversation: every message, in received_at order, verified, with its delivery states.
    b.open(&format!("{base}/console/conversations")).await;
    let list = b.text().await;
    // Its last message has no subject: its first line titles it, beside its participants.
    assert!(
        list.contains("MSRV stays at 1.95; the bump was a typo.")
            && list.contains(&t.requester.address)
            && list.contains(&t.worker.address),
        "{list}"
    );
    b.at_widths("conversations").await;
    b.c.find(Locator::Css(&format!(
        "a[href='/console/conversations/{}']",
        t.conversation
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    b.wait_for("#thread").await;
    b.check("conversation").await;
    let thread = b.text().await;
    let order: Vec<usize> = [
        "Release 0.4 is cut",
        "On it. One question",
        "MSRV stays at 1.95",
    ]
    .iter()
    .map(|s| {
        thread
            .find(s)
            .unwrap_or_else(|| panic!("{s} not shown: {thread}"))
    })
    .collect();
    assert!(order.windows(2).all(|p| p[0] < p[1]), "received_at order");
    assert_eq!(thread.matches("verified").count(), 3, "{thread}");
    assert!(thread.contains("release-0.4.patch"));
    b.at_widths("conversation").await;

    // A task's timeline followed live while the worker reports progress.
    b.open(&format!("{base}/console/tasks")).await;
    let tasks = b.text().await;
    assert!(
        tasks.contains("succeeded Update docs/api.md for /v1/usage."),
        "the instructions beside the state: {tasks}"
    );
    b.at_widths("tasks").await;
    b.c.find(Locator::Css("a[href='/console/attention']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("#attention-failed").await;
    b.check("needs attention").await;
    let attention = b.text().await;
    for want in [
        "failed Run the release checklist.",
        "needs_input Write the migration guide.",
    ] {
        assert!(attention.contains(want), "{want}: {attention}");
    }
    assert!(
        attention.contains(&t.ci_address),
        "the dead letter's recipient: {attention}"
    );
    b.at_widths("attention").await;
    // Search: the failed task's request by its instructions, the words marked.
    b.open(&format!("{base}/console/search?q=release%20checklist"))
        .await;
    b.wait_for("#search-results mark").await;
    b.check("search").await;
    let found = b.text().await;
    assert!(found.contains("Run the release checklist."), "{found}");
    b.at_widths("search").await;
    b.open(&format!("{base}/console/tasks/{}", t.live_task))
        .await;
    b.wait_text("#task-percent", "20%").await;
    w.followup(&t.worker, &t.requester, &t.live_request, &t.live_task, "progress", json!({"percent": 70, "stage": "testing", "note": "Found a race in the lease path.",
        "usage_delta": {"reported_by": "harness", "provider": "anthropic", "model": "claude-opus-5-5", "input_tokens": 12000, "output_tokens": 900}})).await;
    b.wait_text("#task-percent", "70%").await;
    assert!(
        b.text().await.contains("Found a race in the lease path."),
        "the timeline grew without a reload"
    );
    b.check("task, live").await;
    b.at_widths("task").await;
    // The admin's cancel: the page shows the cancel requested, then the worker's acknowledgement
    // ends the task, and the page follows.
    b.c.find(Locator::Css("#reason"))
        .await
        .unwrap()
        .send_keys("Superseded by change 490.")
        .await
        .unwrap();
    b.c.find(Locator::Css("#cancel"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("#cancel-requested").await;
    b.check("after cancel").await;
    w.followup(
        &t.worker,
        &t.requester,
        &t.live_request,
        &t.live_task,
        "result",
        json!({"status": "failed", "failure": {"code": "cancelled", "message": "stopped"}}),
    )
    .await;
    b.wait_text("#task-state", "cancelled").await;
    b.check("cancelled").await;
    b.shot("task-cancelled").await;
    let api = w
        .api(
            Method::GET,
            &format!("/v1/tasks/{}", t.live_task),
            &t.ws_admin,
            None,
        )
        .await
        .1;
    assert_eq!(api["state"], "cancelled");
    assert!(
        api["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["actor"].as_str().unwrap().starts_with("user:")),
        "§6.2: the console's cancel is on the timeline as the admin's"
    );

    // Topics, the policy (refused with the API's errors), usage.
    b.open(&format!("{base}/console/topics")).await;
    assert!(b.text().await.contains("deploys"));
    b.at_widths("topics").await;
    b.open(&format!("{base}/console/policy")).await;
    b.c.find(Locator::Css("#rule-0-from"))
        .await
        .unwrap()
        .send_keys("agent://Bad")
        .await
        .unwrap();
    b.c.find(Locator::Css("#rule-0-to"))
        .await
        .unwrap()
        .send_keys("*")
        .await
        .unwrap();
    b.c.find(Locator::Css("#save-form"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("#policy-error").await;
    b.check("policy refused").await;
    assert!(b.text().await.contains("AB-3026"));
    // Each problem beside its field: the bad pattern under `from`, the missing effect on its rule.
    let beside: Vec<String> = serde_json::from_value(
        b.c.execute(
            "return [...document.querySelectorAll('.field-error')].map((e) => { \
             const row = e.closest('tr'); const field = e.closest('td, .field').querySelector('input, select'); \
             return (row ? row.id : '') + ':' + (field ? field.id : '') + ' ' + e.textContent; });",
            vec![],
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert!(
        beside
            .iter()
            .any(|e| e.starts_with("rule-0:rule-0-from /rules/0/from"))
            && beside
                .iter()
                .any(|e| e.starts_with("rule-0:rule-0-effect /rules/0 ")),
        "{beside:?}"
    );
    b.at_widths("policy").await;
    b.open(&format!("{base}/console/usage")).await;
    let usage = b.text().await;
    assert!(
        usage.contains("harness") && usage.contains("proxy"),
        "sources beside the figures: {usage}"
    );
    b.at_widths("usage").await;

    // CSRF: the suspend form without its token is refused, and nothing changes.
    b.open(&format!("{base}/console/agents/{}", t.requester.id))
        .await;
    b.c.execute(
        "document.querySelector('form[action$=\"/suspend\"] input[name=csrf]').remove();",
        vec![],
    )
    .await
    .unwrap();
    b.c.find(Locator::Css("form[action$='/suspend'] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("#error").await;
    assert!(b.text().await.contains("AB-1020"));
    b.shot("csrf-refused").await;
    let card = w
        .api(
            Method::GET,
            &format!("/v1/agents/{}", t.requester.id),
            &w.admin,
            None,
        )
        .await
        .1;
    assert_eq!(card["suspended"], false);

    // Another workspace's admin: the backend's pages are the pages of things that do not exist.
    b.sign_out().await;
    b.sign_in(&base, &t.other_ws_admin).await;
    let ghost_task = agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Task).to_string();
    for (victim, ghost) in [
        (
            format!("/console/conversations/{}", t.conversation),
            format!(
                "/console/conversations/{}",
                agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Conversation)
            ),
        ),
        (
            format!("/console/tasks/{}", t.live_task),
            format!("/console/tasks/{ghost_task}"),
        ),
        (
            format!("/console/agents/{}", t.requester.id),
            format!(
                "/console/agents/{}",
                agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Agent)
            ),
        ),
    ] {
        b.open(&format!("{base}{victim}")).await;
        let seen = b.text().await;
        b.open(&format!("{base}{ghost}")).await;
        assert_eq!(
            seen,
            b.text().await,
            "{victim} reads like a page that does not exist"
        );
        assert!(!seen.contains("Release") && !seen.contains("Reviewer"));
    }
    b.open(&format!("{base}/console/tasks/{}", t.live_task))
        .await;
    b.shot("not-yours").await;

    // The operator's console.
    b.sign_out().await;
    b.sign_in(&base, &w.operator).await;
    b.open(&format!("{base}/console/tenants")).await;
    b.at_widths("tenants").await;

    // The XSS corpus, in every page that shows it.
    b.sign_out().await;
    b.sign_in(&base, &xss_admin).await;
    let visible: Vec<&String> = corpus
        .payloads
        .iter()
        .filter(|p| !p.chars().any(|c| c == '\u{202e}'))
        .collect();
    let expect_all = |text: &str, what: &str| {
        for p in &visible {
            assert!(
                text.contains(p.as_str()),
                "{what} does not show {p:?} as text"
            );
        }
    };
    b.open(&format!("{base}/console/agents")).await;
    expect_all(&b.text().await, "the directory");
    b.shot("xss-agents").await;
    for id in &corpus.agents {
        b.open(&format!("{base}/console/agents/{id}")).await;
    }
    b.open(&format!("{base}/console/conversations")).await;
    b.open(&format!(
        "{base}/console/conversations/{}",
        corpus.conversation
    ))
    .await;
    let thread = b.text().await;
    expect_all(&thread, "the thread");
    assert!(
        thread.contains("\\u{202E}"),
        "a bidi override is shown, not obeyed"
    );
    b.shot("xss-conversation").await;
    b.open(&format!("{base}/console/tasks")).await;
    b.open(&format!("{base}/console/tasks/{}", corpus.task))
        .await;
    expect_all(&b.text().await, "the task");
    for path in [
        "/console/overview",
        "/console/topics",
        "/console/policy",
        "/console/usage",
    ] {
        b.open(&format!("{base}{path}")).await;
    }
    for p in corpus.payloads.iter().take(10) {
        let q: String = form_urlencoded::byte_serialize(p.as_bytes()).collect();
        b.open(&format!("{base}/console/tasks?state={q}")).await;
        b.open(&format!("{base}/console/usage?since={q}")).await;
        b.open(&format!("{base}/console/conversations?before={q}"))
            .await;
    }
    // Attachments download, never render: a payload file of type text/html is not opened.
    let thread = w
        .api(
            Method::GET,
            &format!("/v1/conversations/{}", corpus.conversation),
            &xss_admin,
            None,
        )
        .await
        .1;
    let blob = thread["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e["data"]["attachments"][0]["ref"].as_str())
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    b.c.goto(&format!(
        "{base}/console/conversations/{}",
        corpus.conversation
    ))
    .await
    .unwrap();
    let before = b.c.current_url().await.unwrap();
    b.c.find(Locator::Css(&format!(
        "a[href='/console/attachments/{blob}']"
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    b.check("after an attachment click").await;
    assert_eq!(
        b.c.current_url().await.unwrap(),
        before,
        "the attachment was downloaded, not opened"
    );
    eprintln!(
        "browser: {} pages checked, {} payloads, screenshots in {}",
        b.pages,
        corpus.payloads.len(),
        b.shots.display()
    );
    b.c.clone().close().await.unwrap();
}
