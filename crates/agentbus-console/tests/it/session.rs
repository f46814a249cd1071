//! Sign-in, sessions and sign-out (issue 19 item 1): a user token is exchanged for a session
//! cookie (HttpOnly, SameSite=Strict, Secure behind HTTPS) that every replica honours, that ends at
//! sign-out, at its lifetime's end, or with the token it was opened with.

use std::sync::Arc;

use reqwest::Method;
use serde_json::json;

use agentbus_gateway::App;
use agentbus_gateway::crypto::DataKey;
use agentbus_runtime::keyfile;

use crate::support::*;

fn attributes(line: &str) -> Vec<String> {
    let mut a: Vec<String> = line
        .split(';')
        .skip(1)
        .map(|s| s.trim().to_owned())
        .collect();
    a.sort();
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_exchanges_a_user_token_for_a_strict_http_only_cookie() {
    let w = World::start().await;
    let form = w.get(None, "/console/sign-in").await;
    assert_eq!(form.status, 200);
    let p = w.try_sign_in(&w.admin).await.unwrap();
    assert!(
        !p.cookie.contains(&w.admin),
        "the token itself is never the cookie"
    );
    let sign_in_form = w.get(None, "/console/sign-in").await;
    let pre = set_cookie(&sign_in_form.headers, "agentbus_console_sign_in").unwrap();
    let field = hidden(&sign_in_form.body, "sign_in").unwrap();
    let answer = w
        .submit_raw(
            None,
            "/console/sign-in",
            &[("sign_in", &field), ("token", &w.admin)],
            &[("cookie", &format!("agentbus_console_sign_in={pre}"))],
        )
        .await;
    assert_eq!(answer.status, 303);
    assert_eq!(answer.location(), "/console/overview");
    let line = set_cookie_line(&answer.headers, "agentbus_console").unwrap();
    assert_eq!(
        attributes(&line),
        [
            "HttpOnly",
            "Max-Age=28800",
            "Path=/console",
            "SameSite=Strict"
        ],
        "plain HTTP on loopback: no Secure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_https_the_cookies_are_secure() {
    let w = World::start_with(|c| c.public_url = "https://console.example".into()).await;
    let form = w.get(None, "/console/sign-in").await;
    let line = set_cookie_line(&form.headers, "agentbus_console_sign_in").unwrap();
    assert!(attributes(&line).contains(&"Secure".to_owned()), "{line}");
    // A TLS-terminating proxy says so in X-Forwarded-Proto.
    let w2 = World::start().await;
    let p = w2
        .submit_raw(
            None,
            "/console/sign-in",
            &[],
            &[("x-forwarded-proto", "https")],
        )
        .await;
    let line = set_cookie_line(&p.headers, "agentbus_console_sign_in").unwrap();
    assert!(attributes(&line).contains(&"Secure".to_owned()), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tokens_and_forms_open_no_session() {
    let w = World::start().await;
    let a = w.agent(&w.admin, "release-bot", json!({})).await;
    for (token, status, code) in [
        (a.token.as_str(), 403, "AB-1002"),
        ("abu_not-a-token", 401, "AB-1001"),
        ("", 401, "AB-1001"),
    ] {
        let p = w.try_sign_in(token).await.unwrap_err();
        assert_eq!(p.status, status, "{token}: {}", p.body);
        assert!(p.body.contains(code), "{token}: {}", p.body);
        assert!(set_cookie(&p.headers, "agentbus_console").is_none());
    }
    // Another site's form (no sign-in cookie, or the wrong one) cannot sign a browser in.
    let form = w.get(None, "/console/sign-in").await;
    let field = hidden(&form.body, "sign_in").unwrap();
    for cookie in ["", "agentbus_console_sign_in=forged"] {
        let p = w
            .submit_raw(
                None,
                "/console/sign-in",
                &[("sign_in", &field), ("token", &w.admin)],
                &[("cookie", cookie)],
            )
            .await;
        assert_eq!(p.status, 403, "{cookie}");
        assert!(p.body.contains("AB-1020"));
        assert!(set_cookie(&p.headers, "agentbus_console").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_pages_go_to_sign_in_and_changes_are_refused() {
    let w = World::start().await;
    let p = w.get(None, "/console/tasks?state=submitted").await;
    assert_eq!(p.status, 303);
    assert_eq!(
        p.location(),
        "/console/sign-in?next=%2Fconsole%2Ftasks%3Fstate%3Dsubmitted"
    );
    let forged = Session {
        cookie: "agentbus_console=forged".into(),
        csrf: "x".into(),
    };
    let p = w.submit(&forged, "/console/sign-out", &[]).await;
    assert_eq!(p.status, 401);
    assert!(p.body.contains("AB-1021"));
    let p = w.get(None, "/console").await;
    assert_eq!(p.location(), "/console/sign-in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_returns_to_the_console_page_asked_for_and_never_elsewhere() {
    let w = World::start().await;
    for (next, want) in [
        ("/console/tasks?state=failed", "/console/tasks?state=failed"),
        ("//evil.example/console/", "/console/overview"),
        ("https://evil.example/", "/console/overview"),
        ("/console/\\evil", "/console/overview"),
        ("/elsewhere", "/console/overview"),
    ] {
        let form = w.get(None, "/console/sign-in").await;
        let pre = set_cookie(&form.headers, "agentbus_console_sign_in").unwrap();
        let field = hidden(&form.body, "sign_in").unwrap();
        let p = w
            .submit_raw(
                None,
                "/console/sign-in",
                &[("sign_in", &field), ("token", &w.admin), ("next", next)],
                &[("cookie", &format!("agentbus_console_sign_in={pre}"))],
            )
            .await;
        assert_eq!(p.status, 303);
        assert_eq!(p.location(), want, "{next}");
    }
}

/// A second replica: its own `App` (caches, presence, token cache) over the same store, as a
/// second gateway process over a shared database would be.
async fn replica(w: &World) -> (String, tokio::sync::oneshot::Sender<()>) {
    let master = keyfile::read(&w.dir.join("master.key")).unwrap();
    let gateway_key = keyfile::read(&w.dir.join("gateway.key")).unwrap();
    let app = Arc::new(App::new(
        w.app.store.clone(),
        Arc::new(w.clock.clone()),
        w.app.config.clone(),
        DataKey::from_bytes(master.seed()),
        gateway_key,
        w.app.gateway_key_id.clone(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = agentbus_gateway::router(app.clone())
        .merge(agentbus_console::router(app, console_config()));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum_serve(listener, router, rx).await;
    });
    (url, tx)
}

async fn axum_serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let _ = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = stop.await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_serves_a_session_and_sign_out_ends_it_on_all() {
    let w = World::start().await;
    let s = w.sign_in(&w.admin).await;
    let (url, _stop) = replica(&w).await;
    let on_b = |path: &'static str| {
        let (http, url, cookie) = (w.http.clone(), url.clone(), s.cookie.clone());
        async move {
            let r = http
                .get(format!("{url}{path}"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }
    };
    assert_eq!(
        on_b("/console/overview").await,
        200,
        "no sticky sessions needed"
    );
    let out = w.submit(&s, "/console/sign-out", &[]).await;
    assert_eq!(out.status, 303);
    let line = set_cookie_line(&out.headers, "agentbus_console").unwrap();
    assert!(line.contains("Max-Age=0"), "{line}");
    assert_eq!(
        on_b("/console/overview").await,
        303,
        "signed out on the other replica too"
    );
    assert_eq!(w.get(Some(&s), "/console/overview").await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_with_its_lifetime_its_token_or_its_tenant() {
    let w = World::start().await;
    let t = w.tenant("acme").await;
    let s = w.sign_in(&t).await;
    // The operator suspends the tenant: its sessions are refused while it is suspended.
    let tenants = w.api(Method::GET, "/v1/tenants", &w.operator, None).await.1;
    let acme = tenants["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["slug"] == "acme")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        w.post(
            &format!("/v1/tenants/{acme}/suspend"),
            &w.operator,
            json!({})
        )
        .await
        .0,
        200
    );
    let p = w.get(Some(&s), "/console/agents").await;
    assert_eq!(p.status, 303);
    assert!(p.location().contains("reason=AB-1003"), "{}", p.location());
    assert_eq!(
        w.post(
            &format!("/v1/tenants/{acme}/resume"),
            &w.operator,
            json!({})
        )
        .await
        .0,
        200
    );
    assert_eq!(
        w.get(Some(&s), "/console/agents").await.status,
        200,
        "nothing lost"
    );
    // Eight hours later it has ended, whatever happened meanwhile.
    w.clock.advance_secs(8 * 3600);
    assert_eq!(w.get(Some(&s), "/console/agents").await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_signs_its_sessions_out() {
    let w = World::start().await;
    let member = w.user(&w.admin, "member", "default").await;
    let s = w.sign_in(&member).await;
    assert_eq!(w.get(Some(&s), "/console/agents").await.status, 200);
    let (dir, clock, tmp) = w.stop().await;
    // Offline, the token's row goes, as `agentbus gateway admin-token` replaces a token.
    let hash = agentbus_gateway::auth::token_hash(&member);
    let db = rusqlite::Connection::open(dir.join("agentbus.db")).unwrap();
    assert_eq!(
        db.execute("DELETE FROM tokens WHERE hash = ?1", [hash.to_vec()])
            .unwrap(),
        1
    );
    drop(db);
    let w = World::start_in(dir, Some(clock), |_| {}).await;
    let p = w.get(Some(&s), "/console/agents").await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(p.location().starts_with("/console/sign-in"));
    let _keep = tmp;
}
