// The core client: starts the offscreen document that runs the Python core and
// calls the core's ops (core-ops.js) in it, with a deadline.

import { CodedError, coreCode, ErrorCode } from "../errors.js";
import { message, Msg, Target } from "../messages.js";

export const OFFSCREEN_URL = "offscreen.html";

/** Create the offscreen document unless it exists (cheap when it does). */
export async function ensureOffscreen(ext) {
  const contexts = await ext.runtime.contexts({ contextTypes: ["OFFSCREEN_DOCUMENT"], documentUrls: [ext.runtime.url(OFFSCREEN_URL)] });
  if (contexts.length > 0) return;
  try {
    await ext.offscreen.create({
      url: OFFSCREEN_URL,
      reasons: ["WORKERS"],
      justification: "Runs Veil's Python privacy core (Pyodide) so prompts are protected before they are sent.",
    });
  } catch (err) {
    if (!/single offscreen|already exists/i.test(String(err?.message))) throw err;
  }
}

/**
 * Call the Python core's `op` (a name from core-ops.js); rejects with a
 * CodedError if the core fails or does not answer within `timeoutMs`.
 * `timings`, when given, receives {core: round trip ms, python: ms inside Python}.
 */
export async function callCore(ext, op, args, timeoutMs, timings = null) {
  const started = performance.now();
  const deadline = Date.now() + timeoutMs;
  const late = `the privacy core did not answer within ${timeoutMs} ms`;
  let ensured = false;
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) throw new CodedError(ErrorCode.TIMEOUT, late);
    let reply;
    try {
      reply = await Promise.race([
        ext.runtime.send(message(Msg.CORE_CALL, Target.OFFSCREEN, { op, args })),
        ext.sleep(left).then(() => ({ ok: false, error: { code: ErrorCode.TIMEOUT, message: late } })),
      ]);
    } catch (err) {
      // No offscreen document yet, or it is still loading its listener: make
      // sure it exists (once) and try again shortly.
      if (/Receiving end does not exist|Could not establish connection/i.test(String(err?.message))) {
        if (!ensured) {
          await ensureOffscreen(ext);
          ensured = true;
        } else {
          await ext.sleep(Math.min(50, Math.max(1, deadline - Date.now())));
        }
        continue;
      }
      throw err;
    }
    if (reply === undefined) {
      // Another extension page answered nothing: the core is not there yet.
      if (!ensured) {
        await ensureOffscreen(ext);
        ensured = true;
      } else {
        await ext.sleep(20);
      }
      continue;
    }
    if (!reply.ok) throw new CodedError(coreCode(reply.error?.code), reply.error?.message || "the privacy core failed");
    if (timings) {
      timings.core = performance.now() - started;
      timings.python = reply.ms;
    }
    return reply.data;
  }
}
