//! The console's harness (feature `console`): a real gateway with the console mounted, on a
//! loopback port, over a real SQLite file, with a `ManualClock`; agents with keys; signed
//! envelopes; console sessions driven over real HTTP with the cookie and the CSRF token a
//! browser would send. Shared by the console's tests and its page bench, which can share code
//! only through a library.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;
use reqwest::header::{COOKIE, HeaderMap, SET_COOKIE};
use serde_json::{Map, Value, json};

use agentbus_console::ConsoleConfig;
use agentbus_gateway::config::StoreSetting;
use agentbus_gateway::{Config, Gateway};
use agentbus_runtime::ManualClock;

pub use crate::Agent;
use crate::gateway::{Harness, sign};

/// A gateway with its console: the kit's [`Harness`] (its fields and calls through `Deref`),
/// whose client follows no redirect, so a test sees the console's `303`s.
pub struct World {
    h: Harness,
}

impl std::ops::Deref for World {
    type Target = Harness;
    fn deref(&self) -> &Harness {
        &self.h
    }
}

/// A signed-in console session: the cookie a browser holds and the CSRF token its pages carry.
#[derive(Clone, Debug)]
pub struct Session {
    /// The `Cookie` header value.
    pub cookie: String,
    /// The CSRF token of its pages.
    pub csrf: String,
}

/// An answer of the console.
#[derive(Debug)]
pub struct Page {
    /// Its status.
    pub status: u16,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: String,
}

impl Page {
    /// Where a redirect points (empty for none).
    pub fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// A client that follows no redirect.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The console settings tests run with: live views look for changes often.
pub fn console_config() -> ConsoleConfig {
    ConsoleConfig {
        live_interval: Duration::from_millis(100),
        ..ConsoleConfig::default()
    }
}

impl World {
    /// A gateway with its console on a fresh temporary directory.
    pub async fn start() -> World {
        World::start_with(|_| {}).await
    }

    /// Same, with changed settings.
    pub async fn start_with(change: impl FnOnce(&mut Config)) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gw");
        let mut w = World::start_in(dir, None, change).await;
        w.h.hold(tmp);
        w
    }

    /// Starts (or restarts) a gateway with its console on `dir`, always on SQLite.
    pub async fn start_in(
        dir: PathBuf,
        clock: Option<ManualClock>,
        change: impl FnOnce(&mut Config),
    ) -> World {
        World::start_full(dir, clock, change, |gw| {
            gw.mount(agentbus_console::router(gw.app.clone(), console_config()))
        })
        .await
    }

    /// A gateway on a fresh temporary directory with the console `mount` mounts: for a test that
    /// keeps a handle on the console (`agentbus_console::Console::new`).
    pub async fn start_mounting(mount: impl FnOnce(&mut Gateway)) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = World::start_full(tmp.path().join("gw"), None, |_| {}, mount).await;
        w.h.hold(tmp);
        w
    }

    async fn start_full(
        dir: PathBuf,
        clock: Option<ManualClock>,
        change: impl FnOnce(&mut Config),
        mount: impl FnOnce(&mut Gateway),
    ) -> World {
        let mut h = Harness::start_full(
            dir,
            clock,
            |c| {
                c.store = StoreSetting::Sqlite;
                change(c);
            },
            mount,
        )
        .await;
        h.http = http_client();
        World { h }
    }

    /// Stops the gateway gracefully; returns its directory, clock and temporary folder.
    pub async fn stop(self) -> (PathBuf, ManualClock, Option<tempfile::TempDir>) {
        self.h.stop().await
    }

    /// Calls the HTTP API.
    pub async fn api(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.h.req(method, path, token, body).await
    }

    /// A user of `workspace` (a slug) with `role`, made by `admin`; returns its token.
    pub async fn user(&self, admin: &str, role: &str, workspace: &str) -> String {
        let (s, v) = self
            .post("/v1/users", admin, json!({"role": role, "workspace": workspace, "name": format!("{role} of {workspace}")}))
            .await;
        assert_eq!(s, 201, "{v}");
        v["token"].as_str().unwrap().to_owned()
    }

    /// A workspace of the tenant `admin` administers.
    pub async fn workspace(&self, admin: &str, slug: &str) -> String {
        let (s, v) = self
            .post("/v1/workspaces", admin, json!({"slug": slug}))
            .await;
        assert_eq!(s, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    /// A tenant made by the operator; returns its admin's token.
    pub async fn tenant(&self, slug: &str) -> String {
        let (s, v) = self
            .post("/v1/tenants", &self.operator, json!({"slug": slug}))
            .await;
        assert_eq!(s, 201, "{v}");
        v["admin"]["token"].as_str().unwrap().to_owned()
    }

    /// Registers an agent with a fresh key through `admin`, with extra card fields.
    pub async fn agent(&self, admin: &str, name: &str, extra: Value) -> Agent {
        let (key, body) = crate::gateway::registration(name, &extra);
        let (s, v) = self.post("/v1/agents", admin, body).await;
        assert_eq!(s, 201, "{v}");
        Agent::from_registration(&v, key)
    }

    /// An unsigned envelope of `kind` (`message`, `task.request`, …) from `from` to `to`.
    pub fn draft(&self, from: &Agent, to: &str, kind: &str, data: Value) -> Map<String, Value> {
        crate::envelope::draft(&from.address, to, kind, self.now(), data)
    }

    /// Signs and publishes; returns the status and body.
    pub async fn publish(&self, from: &Agent, env: Map<String, Value>) -> (u16, Value) {
        let env = sign(from, env);
        let (s, v) = self
            .api(
                Method::POST,
                "/v1/messages",
                &from.token,
                Some(Value::Object(env)),
            )
            .await;
        (s, v)
    }

    /// Publishes and insists it is accepted; returns the receipt.
    pub async fn send(&self, from: &Agent, env: Map<String, Value>) -> Value {
        let (s, v) = self.publish(from, env).await;
        assert_eq!(s, 202, "{v}");
        v
    }

    /// A task.request for `code.review` v1 from `from` to `to`; returns (envelope, task id).
    pub async fn request(
        &self,
        from: &Agent,
        to: &Agent,
        data: Value,
    ) -> (Map<String, Value>, String) {
        let mut env = self.draft(from, &to.address, "task.request", data);
        env.insert("capability".into(), json!("code.review"));
        env.insert("capability_version".into(), json!("1"));
        let receipt = self.send(from, env.clone()).await;
        (env, receipt["task_id"].as_str().unwrap().to_owned())
    }

    /// A lifecycle message of the task `req` created, from `from` to `to`.
    pub async fn followup(
        &self,
        from: &Agent,
        to: &Agent,
        req: &Map<String, Value>,
        task: &str,
        kind: &str,
        data: Value,
    ) -> Value {
        let mut env = self.draft(from, &to.address, &format!("task.{kind}"), data);
        env["conversation_id"] = req["conversation_id"].clone();
        env.insert("correlation_id".into(), req["id"].clone());
        env["data"]["task_id"] = json!(task);
        self.send(from, env).await
    }

    /// Leases and acks everything in `a`'s inbox, as its sidecar would.
    pub async fn receive_all(&self, a: &Agent) -> Vec<Value> {
        let (s, v) = self
            .api(
                Method::GET,
                "/v1/inbox?after=0&wait=0&limit=100",
                &a.token,
                None,
            )
            .await;
        assert_eq!(s, 200, "{v}");
        let list = v["deliveries"].as_array().cloned().unwrap_or_default();
        let acks: Vec<Value> = list
            .iter()
            .map(|d| json!({"sequence": d["sequence"], "delivery": d["delivery"]}))
            .collect();
        if !acks.is_empty() {
            let (s, v) = self
                .post("/v1/inbox/acks", &a.token, json!({"acks": acks}))
                .await;
            assert_eq!(s, 200, "{v}");
        }
        list
    }

    /// Uploads a blob as `a`; returns its `data.attachments` entry.
    pub async fn upload(&self, a: &Agent, name: &str, media_type: &str, bytes: &[u8]) -> Value {
        use sha2::Digest as _;
        let sha = hex::encode(sha2::Sha256::digest(bytes));
        let (s, b) = self
            .post(
                "/v1/blobs",
                &a.token,
                json!({"name": name, "media_type": media_type, "size": bytes.len(), "sha256": sha}),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        let resp = self
            .http
            .put(format!(
                "{}/v1/blobs/{}/content",
                self.url,
                b["id"].as_str().unwrap()
            ))
            .bearer_auth(&a.token)
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        json!({"ref": b["ref"], "name": name, "media_type": media_type, "size": bytes.len(), "sha256": sha})
    }

    // The console.

    async fn call(
        &self,
        method: Method,
        path: &str,
        cookie: Option<&str>,
        form: Option<&[(&str, &str)]>,
        extra: &[(&str, &str)],
    ) -> Page {
        let mut r = self.http.request(method, format!("{}{path}", self.url));
        if let Some(c) = cookie {
            r = r.header(COOKIE, c);
        }
        for (k, v) in extra {
            r = r.header(*k, *v);
        }
        if let Some(f) = form {
            let body: String = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(f.iter())
                .finish();
            r = r
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        Page {
            status,
            headers,
            body: resp.text().await.unwrap(),
        }
    }

    /// `GET` a console path with a session (or none).
    pub async fn get(&self, s: Option<&Session>, path: &str) -> Page {
        self.call(Method::GET, path, s.map(|s| s.cookie.as_str()), None, &[])
            .await
    }

    /// `POST` a form to a console path, with the session's CSRF token unless `fields` sets one.
    pub async fn submit(&self, s: &Session, path: &str, fields: &[(&str, &str)]) -> Page {
        let mut all: Vec<(&str, &str)> = fields.to_vec();
        if !fields.iter().any(|(k, _)| *k == "csrf") {
            all.push(("csrf", &s.csrf));
        }
        self.call(Method::POST, path, Some(&s.cookie), Some(&all), &[])
            .await
    }

    /// `POST` exactly `fields`, with the session cookie and extra headers.
    pub async fn submit_raw(
        &self,
        s: Option<&Session>,
        path: &str,
        fields: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Page {
        self.call(
            Method::POST,
            path,
            s.map(|s| s.cookie.as_str()),
            Some(fields),
            headers,
        )
        .await
    }

    /// Signs in with `token` as a browser would (form, its cookie, the token); panics unless the
    /// console accepts it.
    pub async fn sign_in(&self, token: &str) -> Session {
        self.try_sign_in(token)
            .await
            .unwrap_or_else(|p| panic!("sign-in refused: {} {}", p.status, p.body))
    }

    /// Signs in with `token` as a browser would: the session, or the page that refused it.
    pub async fn try_sign_in(&self, token: &str) -> Result<Session, Page> {
        let form = self.get(None, "/console/sign-in").await;
        assert_eq!(form.status, 200);
        let pre = set_cookie(&form.headers, "agentbus_console_sign_in").unwrap();
        let field = hidden(&form.body, "sign_in").unwrap();
        let cookie = format!("agentbus_console_sign_in={pre}");
        let p = self
            .call(
                Method::POST,
                "/console/sign-in",
                Some(&cookie),
                Some(&[("sign_in", &field), ("token", token)]),
                &[],
            )
            .await;
        if p.status != 303 {
            return Err(p);
        }
        let id = set_cookie(&p.headers, "agentbus_console").unwrap();
        let cookie = format!("agentbus_console={id}");
        let overview = self
            .get(
                Some(&Session {
                    cookie: cookie.clone(),
                    csrf: String::new(),
                }),
                "/console/overview",
            )
            .await;
        assert_eq!(overview.status, 200, "{}", overview.body);
        let csrf = hidden(&overview.body, "csrf").unwrap();
        Ok(Session { cookie, csrf })
    }
}

/// The value a `Set-Cookie` header gives cookie `name`.
pub fn set_cookie(h: &HeaderMap, name: &str) -> Option<String> {
    h.get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            v.strip_prefix(&format!("{name}="))
                .map(|rest| rest.split(';').next().unwrap_or_default().to_owned())
        })
}

/// The full `Set-Cookie` line of cookie `name`.
pub fn set_cookie_line(h: &HeaderMap, name: &str) -> Option<String> {
    h.get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

/// The value of the hidden input `name` in a page.
pub fn hidden(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &html[at + name.len() + 15..];
    Some(rest[..rest.find('"')?].to_owned())
}
