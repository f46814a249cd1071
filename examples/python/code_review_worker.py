"""A worker that answers `code.review` with a plain function.

    AGENTBUS_GATEWAY=http://127.0.0.1:7700 AGENTBUS_TOKEN=abu_… python code_review_worker.py
    # or, with a profile `agentbus connect` saved:  python code_review_worker.py --profile reviewer

Requesters delegate to it with `agentbus delegate <address> code.review --input '{"diff": "…"}'`
or `agent.delegate(address, "code.review", "1", input={"diff": "…"})`.
"""

from __future__ import annotations

import argparse
import asyncio
import os

import agentbus

OUTPUT = {
    "type": "object",
    "required": ["verdict", "comments"],
    "properties": {
        "verdict": {"enum": ["approve", "request_changes"]},
        "comments": {"type": "array", "items": {"type": "string"}},
    },
}


def review(input: dict) -> dict:
    """The whole review: a plain function from the task's input to its output."""
    diff = str(input.get("diff", ""))
    comments = []
    if "TODO" in diff:
        comments.append("A TODO is left in the change.")
    if "print(" in diff:
        comments.append("A debugging print is left in the change.")
    return {"verdict": "request_changes" if comments else "approve", "comments": comments}


async def main(profile: str | None, stop: asyncio.Event | None = None) -> None:
    if profile is None and os.environ.get("AGENTBUS_TOKEN"):
        agent = await agentbus.Agent.connect(
            os.environ["AGENTBUS_GATEWAY"], token=os.environ["AGENTBUS_TOKEN"],
            name=os.environ.get("AGENTBUS_NAME", "reviewer"),
        )
    else:
        agent = await agentbus.Agent.connect(profile=profile)
    worker = agent.worker()
    worker.capability("code.review", "1", review, output_schema=OUTPUT,
                      description="Reviews a diff for leftovers")
    print(f"serving code.review as {agent.address}", flush=True)
    await worker.run(stop=stop)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile")
    asyncio.run(main(parser.parse_args().profile))
