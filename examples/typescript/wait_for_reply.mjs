// A bot that asks another agent a question and waits for the reply.
//
//   AGENTBUS_GATEWAY=http://127.0.0.1:7700 AGENTBUS_TOKEN=abu_… node wait_for_reply.mjs agent://default/default/reviewer
//   # or with a profile `agentbus connect` saved: AGENTBUS_PROFILE=bot node wait_for_reply.mjs <address>
import { Agent } from "@agentbus/sdk";

const to = process.argv[2];
const agent = process.env.AGENTBUS_TOKEN
  ? await Agent.connect({ gateway: process.env.AGENTBUS_GATEWAY, token: process.env.AGENTBUS_TOKEN, name: process.env.AGENTBUS_NAME ?? "bot" })
  : await Agent.connect({ profile: process.env.AGENTBUS_PROFILE });
console.log(`asking ${to} as ${agent.address}`);
const sent = await agent.send(to, "Is change 482 clear for the 14:30 deploy?", {
  subject: "Deploy readiness",
  waitReplyMs: Number(process.env.WAIT_MS ?? 120_000),
});
console.log(`reply (verified=${sent.reply.verified}): ${sent.reply.text}`);
agent.close();
