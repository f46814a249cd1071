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
// - a shell command: `shell.env(input, output)` fills `output.env`.
//
// Usage: node host.mjs <plugin.js> <step.json>; prints one JSON object.
import { readFileSync } from "node:fs"
import { pathToFileURL } from "node:url"

const [pluginPath, stepPath] = process.argv.slice(2)
const step = JSON.parse(readFileSync(stepPath, "utf8"))
const sessions = step.sessions || {}

// client.session.get as the SDK answers it: { data: Session } (a child session has a parentID).
const client = {
  session: {
    get: async ({ path: { id } }) => {
      if (!(id in sessions)) throw new Error(`no session ${id}`)
      return { data: { id, ...sessions[id] } }
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

let result
if (step.type === "prompt") {
  const message = { id: id("msg"), sessionID: step.session, role: "user", time: { created: Date.now() } }
  const parts = [{ id: id("prt"), messageID: message.id, sessionID: step.session, type: "text", text: step.text }]
  await trigger(
    "chat.message",
    { sessionID: step.session, agent: "build", model: { providerID: "test", modelID: "test" }, messageID: message.id },
    { message, parts },
  )
  const ids = new Set(parts.map((p) => p.id))
  const wellFormed = ids.size === parts.length && parts.every((p) => p.messageID === message.id && p.sessionID === step.session)
  const seen = parts.filter((p) => p.type === "text" && !p.ignored).map((p) => p.text).join("\n")
  result = { model_sees: seen, parts: parts.length, well_formed: wellFormed }
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
