// Prints the TypeScript library's frame of the envelope on stdin (profile argv[2], local id argv[3]).
import { frame } from "../../../typescript/dist/index.js";

let text = "";
for await (const chunk of process.stdin) text += chunk;
process.stdout.write(frame(JSON.parse(text), { profile: process.argv[2], localId: process.argv[3] }));
