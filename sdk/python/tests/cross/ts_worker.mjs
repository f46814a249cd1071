// A TypeScript worker for the cross-language tests: serves `text.upper` as the profile argv[2]
// saved under AGENTBUS_HOME, prints "ready" once its card declares it, stops on stdin's end.
import { Agent } from "../../../typescript/dist/index.js";

const agent = Agent.fromProfile(process.argv[2]);
const worker = agent.worker();
worker.capability("text.upper", "1", (job) => ({ output: { text: String(job.input.text).toUpperCase(), by: "typescript" } }), {
  outputSchema: { type: "object", required: ["text"] },
});
await worker.publishCard();
const stop = new AbortController();
process.stdin.on("end", () => { stop.abort(); agent.close(); });
process.stdin.resume();
console.log("ready");
await worker.run({ signal: stop.signal, publishCard: false });
