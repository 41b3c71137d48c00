// Server-sent events read from a fetch() Response (fetch rather than EventSource so
// the token can travel in a header). Shared by the chat and the audit pages.
// Calls onEvent({event, data, id}) for every event block; returns true as soon as
// onEvent returns true (the caller is done), false when the stream ends.
async function readServerSentEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const event = { event: "message", data: "", id: null };
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event.event = line.slice(6).trim();
        else if (line.startsWith("data:")) event.data += line.slice(5).replace(/^ /, "");
        else if (line.startsWith("id:")) event.id = line.slice(3).trim();
      }
      if (onEvent(event) === true) {
        reader.cancel().catch(() => {});
        return true;
      }
    }
  }
}

// A chat completion the companion streams: throws its error message (the HTTP error's or
// one sent in the stream) and calls onChunk(event, delta) for every JSON chunk, with the
// chunk's text delta ("" when it has none). Shared by the chat page and its guest preview.
async function readChatStream(response, onChunk) {
  if (!response.ok) {
    let message = String(response.status);
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  await readServerSentEvents(response, ({ data }) => {
    data = data.trim();
    if (!data || data === "[DONE]") return;
    const event = JSON.parse(data);
    if (event.error) throw new Error(event.error.message);
    onChunk(event, event.choices?.[0]?.delta?.content || "");
  });
}
