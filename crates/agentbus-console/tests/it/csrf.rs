//! CSRF: every change the console makes is refused (AB-1020, nothing stored)
//! without its session's token, with another session's token, or from another site, for every
//! POST route of `agentbus_console::ROUTES`; with the token it goes through.

use crate::fixture::Fixture;
use crate::support::unchanged;

/// The form a POST route takes, and the path with the fixture's objects.
fn form_for(pattern: &str, f: &Fixture) -> Option<(String, Vec<(&'static str, String)>)> {
    let path = pattern.replace(
        "{id}",
        match pattern {
            p if p.starts_with("/console/agents/") => &f.requester.id,
            p if p.starts_with("/console/tasks/") => &f.task,
            p if p.starts_with("/console/policy/") => &f.workspace,
            p if p.starts_with("/console/tenants/") => &f.tenant,
            _ => "",
        },
    );
    let fields = match pattern {
        "/console/sign-in" => return None,
        p if p.starts_with("/console/policy/") => {
            vec![("document", r#"{"default": "deny"}"#.to_owned())]
        }
        p if p.ends_with("/cancel") => vec![("reason", "stop".to_owned())],
        _ => vec![],
    };
    Some((path, fields))
}

/// What a refused attempt sends: its name, its form, its extra headers.
type Attempt<'a> = (&'a str, Vec<(String, String)>, Vec<(&'a str, &'a str)>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_needs_its_session_s_token_from_the_console_s_own_origin() {
    let f = Fixture::build().await;
    let w = &f.w;
    let mine = w.sign_in(&w.admin).await;
    let other = w.sign_in(&f.ws_admin).await;
    let operator = w.sign_in(&w.operator).await;
    let mut checked = 0;
    // Sign-out last and the tenant's suspension just before it: their success changes what the
    // later checks run with.
    let mut routes: Vec<&str> = agentbus_console::ROUTES
        .iter()
        .filter(|(m, _)| *m == "post")
        .map(|(_, p)| *p)
        .collect();
    routes.sort_by_key(|p| {
        (
            *p == "/console/sign-out",
            p.starts_with("/console/tenants/"),
        )
    });
    for pattern in routes {
        let Some((path, fields)) = form_for(pattern, &f) else {
            continue; // sign-in has its own form token (session.rs)
        };
        let s = if pattern.starts_with("/console/tenants/") {
            &operator
        } else {
            &mine
        };
        let with = |csrf: Option<&str>| {
            let mut all: Vec<(String, String)> = fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            if let Some(c) = csrf {
                all.push(("csrf".into(), c.to_owned()));
            }
            all
        };
        let attempts: Vec<Attempt> = vec![
            ("no token", with(None), vec![]),
            ("an empty token", with(Some("")), vec![]),
            ("another session's token", with(Some(&other.csrf)), vec![]),
            (
                "another site's Origin",
                with(Some(&s.csrf)),
                vec![("origin", "https://evil.example")],
            ),
            (
                "a cross-site fetch",
                with(Some(&s.csrf)),
                vec![("sec-fetch-site", "cross-site")],
            ),
        ];
        for (what, form, headers) in attempts {
            let form: Vec<(&str, &str)> =
                form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let before = w.app.store.dump().await.unwrap();
            let p = w.submit_raw(Some(s), &path, &form, &headers).await;
            let after = w.app.store.dump().await.unwrap();
            assert_eq!(p.status, 403, "POST {path} with {what}: {}", p.body);
            assert!(p.body.contains("AB-1020"), "{path} with {what}");
            unchanged(&before, &after, &format!("{path} with {what}"));
            checked += 1;
        }
        // The console's own form, from its own page, goes through.
        let form = with(Some(&s.csrf));
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let p = w
            .submit_raw(
                Some(s),
                &path,
                &form,
                &[("origin", &w.url), ("sec-fetch-site", "same-origin")],
            )
            .await;
        assert_eq!(p.status, 303, "{path}: {}", p.body);
    }
    assert_eq!(checked, 5 * 7, "every POST route but sign-in");
}
