// A TypeScript requester for the cross-language tests: as the profile argv[2], delegates
// `text.upper` to argv[3] and prints the result as JSON.
import { Agent } from "../../../typescript/dist/index.js";

const agent = Agent.fromProfile(process.argv[2]);
const task = await agent.delegate(process.argv[3], "text.upper", "1", { input: { text: "from typescript" }, instructions: "Upper-case it." });
const result = await task.wait(30_000);
console.log(JSON.stringify(result));
agent.close();
