// A small Markdown renderer for the model's answers, safe by construction: the text is
// HTML-escaped first, and only the tags below are produced from the escaped text
// (paragraphs, line breaks, headings, lists, code blocks, inline code, bold, italics,
// and links whose address is http(s) -- any other scheme stays plain text).
// The result may be given to innerHTML; the model's own markup never is.
"use strict";

function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

// One line of escaped text: code spans first (nothing inside them is formatted).
function markdownInline(escaped) {
  const codes = [];
  let s = escaped.replace(/`([^`\n]+)`/g, (_, code) => { codes.push(code); return `\u0000${codes.length - 1}\u0000`; });
  s = s.replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>");
  s = s.replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, "$1<em>$2</em>");
  s = s.replace(/(^|[^_\w])_([^_\n]+)_(?!\w)/g, "$1<em>$2</em>");
  s = s.replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s()<>]+)\)/g,
    '<a href="$2" target="_blank" rel="noopener noreferrer nofollow">$1</a>');
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${codes[Number(i)]}</code>`);
}

function renderMarkdown(text) {
  const lines = escapeHtml(text).split("\n");
  const out = [];
  let paragraph = [];
  let list = null; // "ul" or "ol"
  const flush = () => {
    if (paragraph.length) out.push(`<p>${paragraph.map(markdownInline).join("<br>")}</p>`);
    paragraph = [];
  };
  const closeList = () => { if (list) { out.push(`</${list}>`); list = null; } };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*```\s*([\w+-]*)\s*$/);
    if (fence) {
      flush(); closeList();
      const code = [];
      for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++) code.push(lines[i]);
      const lang = fence[1] ? ` data-lang="${fence[1]}"` : "";
      out.push(`<pre><code${lang}>${code.join("\n")}</code></pre>`);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
    const numbered = line.match(/^\s*\d{1,3}[.)]\s+(.*)$/);
    if (heading) {
      flush(); closeList();
      const level = Math.min(heading[1].length + 2, 6); // h3..h6 inside a message
      out.push(`<h${level}>${markdownInline(heading[2])}</h${level}>`);
    } else if (bullet || numbered) {
      flush();
      const kind = bullet ? "ul" : "ol";
      if (list !== kind) { closeList(); out.push(`<${kind}>`); list = kind; }
      out.push(`<li>${markdownInline((bullet || numbered)[1])}</li>`);
    } else if (!line.trim()) {
      flush(); closeList();
    } else {
      closeList();
      paragraph.push(line);
    }
  }
  flush(); closeList();
  return out.join("");
}
