//! The attribute names spans carry, from one version of the OpenTelemetry semantic conventions
//! ([`VERSION`]; docs/observability.md lists which span carries which).

/// The semantic conventions version every name here is taken from.
pub const VERSION: &str = "1.37.0";
/// Its schema URL, set on the instrumentation scope.
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.37.0";

/// `messaging.system`: always [`SYSTEM`].
pub const MESSAGING_SYSTEM: &str = "messaging.system";
/// The value of `messaging.system`.
pub const SYSTEM: &str = "agentbus";
/// `messaging.operation.type`: `send`, `receive`, `process`, `settle` or `create`.
pub const MESSAGING_OPERATION_TYPE: &str = "messaging.operation.type";
/// `messaging.operation.name`: the system's own name of the operation (`publish`, `lease`, …).
pub const MESSAGING_OPERATION_NAME: &str = "messaging.operation.name";
/// `messaging.destination.name`: the recipient's address or the topic.
pub const MESSAGING_DESTINATION_NAME: &str = "messaging.destination.name";
/// `messaging.message.id`: the envelope's `id`.
pub const MESSAGING_MESSAGE_ID: &str = "messaging.message.id";
/// `messaging.message.conversation_id`: the envelope's `conversation_id`.
pub const MESSAGING_CONVERSATION_ID: &str = "messaging.message.conversation_id";
/// `messaging.message.body.size`: the envelope's size in bytes.
pub const MESSAGING_BODY_SIZE: &str = "messaging.message.body.size";
/// `messaging.batch.message_count`: copies a publish stored (one per recipient inbox).
pub const MESSAGING_BATCH_COUNT: &str = "messaging.batch.message_count";
/// `messaging.client.id`: the agent address acting.
pub const MESSAGING_CLIENT_ID: &str = "messaging.client.id";

/// `gen_ai.operation.name`: `invoke_agent` for a worker's harness turn.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.agent.name`: the agent's address.
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// `gen_ai.conversation.id`: the envelope's `conversation_id`.
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.provider.name`: the harness a worker runs (`claude`, `codex`, …).
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.request.model`: the model a turn reported.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.usage.input_tokens`.
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";

/// `error.type`: the `AB-` code of a refusal.
pub const ERROR_TYPE: &str = "error.type";

// AgentBus's own attributes, for what no convention names.

/// The envelope's `type` (`agentbus.task.request`, …).
pub const MESSAGE_TYPE: &str = "agentbus.message.type";
/// The envelope's `subject`, only when a setting asks for it.
pub const MESSAGE_SUBJECT: &str = "agentbus.message.subject";
/// The task a message belongs to.
pub const TASK_ID: &str = "agentbus.task.id";
/// A task's state after a transition.
pub const TASK_STATE: &str = "agentbus.task.state";
/// Who made a task transition.
pub const TASK_ACTOR: &str = "agentbus.task.actor";
/// Whether a message arrived after its task had ended (§6's late flag).
pub const TASK_LATE: &str = "agentbus.task.late";
/// Which delivery of a copy this is (1 for the first).
pub const DELIVERY_ATTEMPT: &str = "agentbus.delivery.attempt";
/// How a copy was delivered: `long_poll` or `websocket`.
pub const DELIVERY_TRANSPORT: &str = "agentbus.delivery.transport";
/// The timer that fired (`deadline`, `ack_timeout`, …).
pub const TIMER: &str = "agentbus.timer";
/// The workspace of the message.
pub const WORKSPACE: &str = "agentbus.workspace";
/// Cost in USD a turn reported.
pub const USAGE_COST_USD: &str = "agentbus.usage.cost_usd";
