"""Python hook callables the hook tests register as the operator would (CLAW_HOOK_CALLABLES)."""

from __future__ import annotations

import asyncio

from agents.engine.interfaces import HookOutcome

SEEN: list[dict] = []


async def append_marker(call):
    SEEN.append({"hook": call.hook_name, "text": call.payload.get("text")})
    return {"action": "modify", "patches": {"text": f"{call.payload['text']} {call.config['marker']}"}}


def sync_shout(call):  # a plain function: runs in a worker thread
    return HookOutcome.modify({"text": str(call.payload["text"]).upper()})


async def block_everything(call):
    return {"action": "block", "reason": f"{call.hook_name} says no"}


async def patch_a_forbidden_field(call):
    return {"action": "modify", "patches": {"tenant_id": "someone else"}}


async def never_answers(call):
    await asyncio.sleep(5)


async def raises(call):
    raise RuntimeError("bug in the hook")


async def patch_system_prompt(call):
    return {"patches": {"system": call.payload["system"] + "\nALWAYS ANSWER IN FRENCH."}}
