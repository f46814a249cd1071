// Loading a profile the CLI saved: the file key store is read; a profile whose key is in the OS
// keychain is refused with a typed AB-1031 whose fix names the command that makes a usable one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Agent, AgentBusError, InputError, KeychainProfileError, SigningKey } from "../dist/index.js";

function home(keyStore) {
  const dir = mkdtempSync(join(tmpdir(), "agentbus-ts-home-"));
  mkdirSync(join(dir, "profiles"), { recursive: true });
  mkdirSync(join(dir, "keys"), { recursive: true });
  const profile = {
    name: "reviewer", gateway: "http://127.0.0.1:7700", agent_id: "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V",
    address: "agent://default/default/reviewer", token: "aba_x", key_id: "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V",
  };
  if (keyStore !== undefined) profile.key_store = keyStore;
  writeFileSync(join(dir, "profiles", "reviewer.json"), JSON.stringify(profile));
  return dir;
}

test("a keychain profile is refused with AB-1031, and its fix names the command", async () => {
  const dir = home("keychain");
  try {
    const check = (e) => {
      assert.ok(e instanceof KeychainProfileError);
      assert.ok(e instanceof InputError && e instanceof AgentBusError);
      assert.equal(e.code, "AB-1031");
      assert.equal(e.profile, "reviewer");
      assert.equal(e.message, "AB-1031: profile reviewer keeps its key in the OS keychain; this library reads only key files");
      assert.equal(e.fix, 'give the agent a key file under a second profile: AGENTBUS_KEYSTORE=file agentbus connect --gateway http://127.0.0.1:7700 --token <agent credential> --agent agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V --name reviewer --profile reviewer-file, then Agent.connect({ profile: "reviewer-file" }); or pass gateway, credential, key, keyId and address to Agent.connect');
      assert.equal(e.docUrl, "/errors/AB-1031");
      return true;
    };
    assert.throws(() => Agent.fromProfile("reviewer", dir), check);
    await assert.rejects(Agent.connect({ profile: "reviewer", home: dir }), check);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a file profile loads (the CLI's older profiles have no key_store: file); a missing key file is AB-1030", () => {
  const dir = home(undefined);
  try {
    assert.throws(() => Agent.fromProfile("reviewer", dir), (e) => e instanceof AgentBusError && e.code === "AB-1030");
    const key = SigningKey.generate();
    writeFileSync(join(dir, "keys", "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V.key"), key.toKeyFile());
    const agent = Agent.fromProfile(undefined, dir);
    assert.equal(agent.key.publicKey, key.publicKey);
    assert.equal(agent.address, "agent://default/default/reviewer");
    agent.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
