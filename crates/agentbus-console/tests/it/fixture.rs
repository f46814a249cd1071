//! A victim and its neighbours: workspace `backend` of tenant `default` with two agents, a
//! conversation (with a reply, an acked copy and an attachment), a task that reported progress,
//! usage and cost, and a topic; users of every role around it, in its workspace, in another
//! workspace of its tenant and in another tenant. Every text of the victim carries `MARK`.

use serde_json::{Map, Value, json};

use agentbus_protocol::ids::IdKind;
use agentbus_runtime::mint;

use crate::support::*;

/// What every victim text carries, so a page that leaks any of it is caught.
pub const MARK: &str = "VICTIM-SECRET";

pub struct Fixture {
    pub w: World,
    /// The `ws_` id of `backend`.
    pub workspace: String,
    /// The tenant `default`'s id.
    pub tenant: String,
    /// Admin of `backend`.
    pub ws_admin: String,
    /// Member of `backend`, owning nothing.
    pub member: String,
    /// Admin of `frontend`, another workspace of the tenant.
    pub other_ws_admin: String,
    /// Member of `frontend`.
    pub other_member: String,
    /// Tenant admin of tenant `other`.
    pub other_tenant_admin: String,
    pub requester: Agent,
    pub worker: Agent,
    pub conversation: String,
    pub message_id: String,
    pub reply_id: String,
    pub blob: String,
    pub task: String,
    pub request: Map<String, Value>,
}

/// A missing object of each kind, to compare the victim's with.
pub struct Ghost {
    pub agent: String,
    pub conversation: String,
    pub task: String,
    pub blob: String,
    pub workspace: String,
    pub tenant: String,
}

impl Ghost {
    pub fn new() -> Ghost {
        Ghost {
            agent: mint(IdKind::Agent).to_string(),
            conversation: mint(IdKind::Conversation).to_string(),
            task: mint(IdKind::Task).to_string(),
            blob: mint(IdKind::Blob).to_string(),
            workspace: mint(IdKind::Workspace).to_string(),
            tenant: mint(IdKind::Tenant).to_string(),
        }
    }
}

impl Fixture {
    pub async fn build() -> Fixture {
        let w = World::start().await;
        let admin = w.admin.clone();
        let workspace = w.workspace(&admin, "backend").await;
        w.workspace(&admin, "frontend").await;
        let ws_admin = w.user(&admin, "admin", "backend").await;
        let member = w.user(&admin, "member", "backend").await;
        let other_ws_admin = w.user(&admin, "admin", "frontend").await;
        let other_member = w.user(&admin, "member", "frontend").await;
        let other_tenant_admin = w.tenant("other").await;
        let requester = w
            .agent(
                &admin,
                "release-bot",
                json!({"workspace": "backend", "visibility": "private", "display_name": format!("{MARK} Release bot"), "description": format!("{MARK} ships releases")}),
            )
            .await;
        let worker = w
            .agent(
                &admin,
                "reviewer",
                json!({"workspace": "backend", "visibility": "private", "display_name": format!("{MARK} Reviewer"),
                       "capabilities": [{"name": "code.review", "version": "1", "description": format!("{MARK} reviews")}]}),
            )
            .await;
        let attachment = w
            .upload(
                &requester,
                &format!("{MARK}-notes.txt"),
                "text/plain",
                format!("{MARK} file").as_bytes(),
            )
            .await;
        let blob = attachment["ref"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        let mut first = w.draft(
            &requester,
            &worker.address,
            "message",
            json!({"text": format!("{MARK} please look at build 7"), "attachments": [attachment]}),
        );
        first.insert("subject".into(), json!(format!("{MARK} build 7")));
        let conversation = first["conversation_id"].as_str().unwrap().to_owned();
        let message_id = first["id"].as_str().unwrap().to_owned();
        w.send(&requester, first).await;
        w.receive_all(&worker).await;
        let mut reply = w.draft(
            &worker,
            &requester.address,
            "message",
            json!({"text": format!("{MARK} looking now")}),
        );
        reply["conversation_id"] = json!(conversation);
        reply.insert("correlation_id".into(), json!(message_id));
        let reply_id = reply["id"].as_str().unwrap().to_owned();
        w.send(&worker, reply).await;
        let (request, task) = w
            .request(
                &requester,
                &worker,
                json!({"instructions": format!("{MARK} review change 482"), "constraints": {"accept_timeout_s": 600}}),
            )
            .await;
        w.followup(
            &worker,
            &requester,
            &request,
            &task,
            "accept",
            json!({"note": format!("{MARK} on it")}),
        )
        .await;
        w.followup(
            &worker,
            &requester,
            &request,
            &task,
            "progress",
            json!({"percent": 40, "stage": "reading", "note": format!("{MARK} halfway"),
                   "usage_delta": {"reported_by": "harness", "provider": "anthropic", "model": format!("{MARK}-model"), "input_tokens": 1200, "output_tokens": 80}}),
        )
        .await;
        let (s, v) = w
            .api(
                reqwest::Method::PUT,
                "/v1/topics/victim-topic/subscription",
                &worker.token,
                None,
            )
            .await;
        assert_eq!(s, 200, "{v}");
        let tenant = w.app.store_tenant_id("default").await;
        Fixture {
            w,
            workspace,
            tenant,
            ws_admin,
            member,
            other_ws_admin,
            other_member,
            other_tenant_admin,
            requester,
            worker,
            conversation,
            message_id,
            reply_id,
            blob,
            task,
            request,
        }
    }
}

/// The id of a tenant by slug, for tests.
pub trait TenantId {
    async fn store_tenant_id(&self, slug: &str) -> String;
}

impl TenantId for std::sync::Arc<agentbus_gateway::App> {
    async fn store_tenant_id(&self, slug: &str) -> String {
        use agentbus_store::Store as _;
        self.store.tenant_by_slug(slug).await.unwrap().unwrap().id
    }
}
