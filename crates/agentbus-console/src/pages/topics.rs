//! Topics (§4.4) with their subscribers: `GET /v1/topics` as an admin reads it.

use askama::Template;
use axum::response::Response;

use agentbus_gateway::identity;

use crate::render::{self, Chrome, page, peer};
use crate::session::Viewer;

struct TopicRow {
    workspace: String,
    address: String,
    created: String,
    subscribers: Vec<(String, String)>,
}

#[derive(Template)]
#[template(path = "topics.html")]
struct TopicsPage<'a> {
    chrome: Option<&'a Chrome>,
    topics: Vec<TopicRow>,
}

/// `GET /console/topics`: the topics of every workspace the viewer administers.
pub(crate) async fn list(v: Viewer) -> Response {
    let r = async {
        let app = &v.console.app;
        let tenant = app
            .tenant_row(v.who.tenant_id())
            .await?
            .map(|t| t.slug)
            .unwrap_or_default();
        let mut topics = Vec::new();
        for t in identity::topics_for(app, &v.who, None).await? {
            let mut subscribers = Vec::new();
            for id in &t.subscribers {
                let label = match app.agent_row(id).await? {
                    Some(a) => peer(&app.address_of(&a).await?),
                    None => id.clone(),
                };
                subscribers.push((id.clone(), label));
            }
            topics.push(TopicRow {
                address: format!("topic://{tenant}/{}/{}", t.workspace.slug, t.name),
                workspace: t.workspace.slug,
                created: render::time(t.created_at),
                subscribers,
            });
        }
        page(&TopicsPage {
            chrome: Some(&v.chrome),
            topics,
        })
    }
    .await;
    v.respond(r)
}
