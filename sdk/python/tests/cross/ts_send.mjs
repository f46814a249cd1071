// Sends argv[4] to argv[3] as the profile argv[2] and prints the envelope sent, as JSON.
import { Agent } from "../../../typescript/dist/index.js";

const agent = Agent.fromProfile(process.argv[2]);
const sent = await agent.send(process.argv[3], process.argv[4], { subject: "From TypeScript" });
console.log(JSON.stringify(sent.envelope));
agent.close();
