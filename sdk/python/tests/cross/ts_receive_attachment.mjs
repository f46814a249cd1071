// Receives one message as the profile argv[2] with the TypeScript library, then reads its one
// attachment through the gateway (GET /v1/blobs/{id}/content, which serves S3-stored blobs too:
// the library has no download call) and prints {verified, name, size, sha256} as JSON.
import { createHash } from "node:crypto";
import { Agent } from "../../../typescript/dist/index.js";

const agent = Agent.fromProfile(process.argv[2]);
for await (const message of agent.messages()) {
  const [att] = message.envelope.data.attachments;
  const id = att.ref.split("/").pop();
  const resp = await fetch(`${agent.gateway}/v1/blobs/${id}/content`, {
    headers: { authorization: `Bearer ${agent.credential}` },
  });
  if (!resp.ok) throw new Error(`GET content: ${resp.status} ${await resp.text()}`);
  const bytes = Buffer.from(await resp.arrayBuffer());
  await message.ack();
  console.log(JSON.stringify({
    verified: message.verified, name: att.name, size: bytes.length,
    sha256: createHash("sha256").update(bytes).digest("hex"),
  }));
  break;
}
agent.close();
