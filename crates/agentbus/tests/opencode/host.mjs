// A host for OpenCode plugins, for the test of the plugin `agentbus hooks install opencode` writes.
//
// It implements the part of OpenCode's documented plugin API the plugin uses (the `Hooks` type of
// @opencode-ai/plugin, packages/plugin/src/index.ts; https://opencode.ai/docs/plugins): it imports
// the plugin file as OpenCode loads a plugin from its plugins folder, calls every exported plugin
// function with a PluginInput (`client`, `project`, `directory`, `worktree`, `$`, `serverUrl`),
// and runs one step through the hooks with their documented input and output objects. It then
// reports what the model would see, built the way OpenCode builds it:
//
// - a prompt: a user message and its parts go through `chat.message(input, output)`; every `text`
//   part of the message, synthetic ones included and `ignored` ones excluded, is the model's input;
// - a tool call: `tool.execute.before(input, output)`; an Error thrown there ends the call and its
//   message is the tool result the model reads; otherwise the tool runs and
//   `tool.execute.after(input, output)` may change `output.output`, which is the result the model
//   reads;
// - a shell command: `shell.env(input, output)` fills `output.env`;
// - the end of a turn: `session.idle` reaches the `event` hook as OpenCode publishes bus events
//   (`{ event: { type: "session.idle", properties: { sessionID } } }`); a prompt the plugin then
//   sends through `client.session.prompt` runs as OpenCode runs one (a user message whose parts go
//   through `chat.message`), and the turn it starts ends in `session.idle` again.
//
// Usage: node host.mjs <plugin.js> <step.json>; prints one JSON object.
import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { pathToFileURL } from "node:url"

const [pluginPath, stepPath] = process.argv.slice(2)
const step = JSON.parse(readFileSync(stepPath, "utf8"))
const sessions = step.sessions || {}

// client.session.get as the SDK answers it: { data: Session } (a child session has a parentID);
// client.session.prompt({ path: { id }, body: { parts } }) runs a prompt through the hooks.
const prompted = []
const client = {
  session: {
    get: async ({ path: { id } }) => {
      if (!(id in sessions)) throw new Error(`no session ${id}`)
      return { data: { id, ...sessions[id] } }
    },
    prompt: async ({ path: { id }, body }) => {
      const run = prompt(id, body.parts)
      prompted.push(run)
      return { data: await run }
    },
  },
}

const mod = await import(pathToFileURL(pluginPath).href)
const hooks = []
for (const plugin of Object.values(mod)) {
  if (typeof plugin !== "function") continue
  hooks.push(
    await plugin({
      client,
      project: { id: "prj_test", worktree: step.directory },
      directory: step.directory,
      worktree: step.directory,
      serverUrl: new URL("http://127.0.0.1:4096"),
      $: undefined,
    }),
  )
}

async function trigger(name, input, output) {
  for (const h of hooks) {
    if (typeof h[name] === "function") await h[name](input, output)
  }
}

let n = 0
const id = (prefix) => `${prefix}_host${(++n).toString().padStart(6, "0")}`

// A user message of `session` with `given` parts ({ type: "text", text }), through chat.message.
async function prompt(session, given) {
  const message = { id: id("msg"), sessionID: session, role: "user", time: { created: Date.now() } }
  const parts = given.map((p) => ({ id: id("prt"), messageID: message.id, sessionID: session, ...p }))
  await trigger(
    "chat.message",
    { sessionID: session, agent: "build", model: { providerID: "test", modelID: "test" }, messageID: message.id },
    { message, parts },
  )
  const ids = new Set(parts.map((p) => p.id))
  const wellFormed = ids.size === parts.length && parts.every((p) => p.messageID === message.id && p.sessionID === session)
  const seen = parts.filter((p) => p.type === "text" && !p.ignored).map((p) => p.text).join("\n")
  return { model_sees: seen, parts: parts.length, well_formed: wellFormed }
}

let result
if (step.type === "prompt") {
  result = await prompt(step.session, [{ type: "text", text: step.text }])
} else if (step.type === "idle") {
  // Turn ends until one ends without a prompt (at most `rounds`); before each, `between[i]` (an
  // argv) runs, as a peer sending while the session works.
  const prompts = []
  for (let round = 0; round < (step.rounds || 10); round++) {
    const cmd = (step.between || [])[round]
    if (cmd) spawnSync(cmd[0], cmd.slice(1), { stdio: "ignore" })
    const before = prompted.length
    await trigger("event", { event: { type: "session.idle", properties: { sessionID: step.session } } })
    await new Promise((r) => setTimeout(r, 0))
    if (prompted.length === before) break
    prompts.push(await prompted[prompted.length - 1])
  }
  result = { prompts }
} else if (step.type === "tool") {
  const callID = id("call")
  const args = { command: "ls" }
  try {
    await trigger("tool.execute.before", { tool: step.tool, sessionID: step.session, callID }, { args })
    const output = { title: step.tool, output: "file-a\nfile-b", metadata: {} }
    await trigger("tool.execute.after", { tool: step.tool, sessionID: step.session, callID, args }, output)
    result = { blocked: false, model_sees: output.output }
  } catch (e) {
    result = { blocked: true, model_sees: String((e && e.message) || e) }
  }
} else if (step.type === "shell") {
  const output = { env: {} }
  await trigger("shell.env", { cwd: step.directory, sessionID: step.session, callID: id("call") }, output)
  result = { env: output.env }
} else {
  throw new Error(`unknown step ${step.type}`)
}
process.stdout.write(JSON.stringify(result))
