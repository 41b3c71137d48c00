#!/usr/bin/env node
// Build the loadable extension: build/extension/ (for "Load unpacked") and
// build/veil-extension.zip.
//
//   node extension/build.mjs            build
//   node extension/build.mjs --if-stale build only if the sources changed
//   node extension/build.mjs --test-switches [--if-stale]
//                                       build/extension-test/: the same, with
//                                       the e2e tests' switches compiled in
//                                       (chrome.storage "veilTestSwitches";
//                                       the release build has none)
//
// Bundles Pyodide's runtime files from node_modules/pyodide and every file of
// the py_core package (plus the JSON bridge) into python/veil_core.zip;
// nothing is fetched from a CDN at run time.

import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import zlib from "node:zlib";

import * as esbuild from "esbuild";

import { compiledCore, compiledStdlib } from "./compile-stdlib.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "..");
const TEST_SWITCHES = process.argv.includes("--test-switches");
const OUT = path.join(ROOT, "build", TEST_SWITCHES ? "extension-test" : "extension");
const ZIP_OUT = TEST_SWITCHES ? null : path.join(ROOT, "build", "veil-extension.zip");
const PYODIDE_DIR = path.join(ROOT, "node_modules", "pyodide");
const PYODIDE_FILES = ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"];
const PY_CORE = path.join(ROOT, "py_core");

function walk(dir, base = dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    if (entry.name === "__pycache__" || entry.name.startsWith(".")) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...walk(full, base));
    else if (entry.isFile() && !entry.name.endsWith(".pyc")) out.push(path.relative(base, full));
  }
  return out;
}

/** A hash of every input, so a stale build can be detected (and a snapshot keyed). */
function sourceHash() {
  const hash = createHash("sha256");
  const inputs = [
    ...walk(path.join(HERE)).filter((f) => !f.startsWith("node_modules")).map((f) => path.join(HERE, f)),
    ...walk(PY_CORE).map((f) => path.join(PY_CORE, f)),
    path.join(PYODIDE_DIR, "package.json"),
  ];
  for (const file of inputs.sort()) {
    hash.update(path.relative(ROOT, file));
    hash.update(fs.readFileSync(file));
  }
  return hash.digest("hex").slice(0, 16);
}

// ------------------------------------------------------------------ zip writer

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

function crc32(buf) {
  let c = 0xffffffff;
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** A zip archive of [name, bytes] entries; `deflate` compresses (fixed 1980 timestamps: reproducible). */
function makeZip(entries, { deflate }) {
  const locals = [];
  const central = [];
  let offset = 0;
  for (const [name, data] of entries) {
    const nameBytes = Buffer.from(name, "utf8");
    const body = deflate ? zlib.deflateRawSync(data, { level: 9 }) : data;
    const method = deflate ? 8 : 0;
    const crc = crc32(data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(0x0800, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt16LE(0, 10);
    local.writeUInt16LE(0x21, 12);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(body.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(nameBytes.length, 26);
    local.writeUInt16LE(0, 28);
    locals.push(local, nameBytes, body);
    const head = Buffer.alloc(46);
    head.writeUInt32LE(0x02014b50, 0);
    head.writeUInt16LE(20, 4);
    head.writeUInt16LE(20, 6);
    head.writeUInt16LE(0x0800, 8);
    head.writeUInt16LE(method, 10);
    head.writeUInt16LE(0, 12);
    head.writeUInt16LE(0x21, 14);
    head.writeUInt32LE(crc, 16);
    head.writeUInt32LE(body.length, 20);
    head.writeUInt32LE(data.length, 24);
    head.writeUInt16LE(nameBytes.length, 28);
    head.writeUInt32LE(offset, 42);
    central.push(head, nameBytes);
    offset += local.length + nameBytes.length + body.length;
  }
  const centralBytes = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(centralBytes.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, centralBytes, end]);
}

// ------------------------------------------------------------------ icons

function png(size, draw) {
  const raw = Buffer.alloc((size * 4 + 1) * size);
  for (let y = 0; y < size; y++) {
    raw[y * (size * 4 + 1)] = 0;
    for (let x = 0; x < size; x++) {
      const [r, g, b, a] = draw((x + 0.5) / size, (y + 0.5) / size);
      raw.set([r, g, b, a], y * (size * 4 + 1) + 1 + x * 4);
    }
  }
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, "ascii"), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(body));
    return Buffer.concat([len, body, crc]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(size, 0);
  header.writeUInt32BE(size, 4);
  header[8] = 8;
  header[9] = 6;
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", header),
    chunk("IDAT", zlib.deflateSync(raw)),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

/** Veil's icon: a shield with a dotted "veil" band across it. */
function iconPixel(u, v) {
  const x = u - 0.5;
  const y = v;
  const half = y < 0.55 ? 0.4 : 0.4 * Math.sqrt(Math.max(0, 1 - ((y - 0.55) / 0.4) ** 2));
  const inShield = y > 0.08 && y < 0.95 && Math.abs(x) < half;
  if (!inShield) return [0, 0, 0, 0];
  const band = y > 0.4 && y < 0.6;
  if (band) return Math.floor(u * 12) % 2 === 0 ? [226, 232, 240, 255] : [148, 163, 184, 255];
  return [30, 64, 175, 255];
}

// ------------------------------------------------------------------ build

async function build() {
  const started = Date.now();
  const hash = sourceHash();
  fs.rmSync(OUT, { recursive: true, force: true });
  fs.mkdirSync(path.join(OUT, "pyodide"), { recursive: true });
  fs.mkdirSync(path.join(OUT, "python"), { recursive: true });
  fs.mkdirSync(path.join(OUT, "icons"), { recursive: true });

  for (const file of PYODIDE_FILES) {
    const src = path.join(PYODIDE_DIR, file);
    if (!fs.existsSync(src)) throw new Error(`${src} is missing: run \`npm ci\` at the repository root first`);
    fs.copyFileSync(src, path.join(OUT, "pyodide", file));
  }
  // The standard library compiled to .pyc once (compile-stdlib.mjs): the core's cold start skips compiling it.
  fs.copyFileSync(await compiledStdlib(PYODIDE_DIR, path.join(ROOT, "build", "cache")), path.join(OUT, "pyodide", "python_stdlib.zip"));

  const pyEntries = walk(PY_CORE).map((rel) => [`py_core/${rel.split(path.sep).join("/")}`, fs.readFileSync(path.join(PY_CORE, rel))]);
  if (!pyEntries.some(([name]) => name === "py_core/sanitize.py")) throw new Error("py_core/sanitize.py is missing");
  pyEntries.push(["veil_bridge.py", fs.readFileSync(path.join(HERE, "python", "veil_bridge.py"))]);
  // ... with each module compiled by Pyodide's CPython (compile-stdlib.mjs), so the cold start imports without compiling.
  pyEntries.push(...(await compiledCore(PYODIDE_DIR, path.join(ROOT, "build", "cache"), pyEntries)));
  fs.writeFileSync(path.join(OUT, "python", "veil_core.zip"), makeZip(pyEntries, { deflate: false }));

  const common = {
    bundle: true,
    sourcemap: false,
    target: "chrome116",
    legalComments: "none",
    define: { __VEIL_BUILD_ID__: JSON.stringify(hash), __VEIL_TEST_SWITCHES__: JSON.stringify(TEST_SWITCHES) },
    logLevel: "warning",
  };
  await esbuild.build({
    ...common,
    entryPoints: {
      sw: path.join(HERE, "src", "sw.js"),
      offscreen: path.join(HERE, "src", "offscreen.js"),
      "core-worker": path.join(HERE, "src", "core-worker.js"),
      popup: path.join(HERE, "src", "popup.js"),
      options: path.join(HERE, "src", "options.js"),
      sidepanel: path.join(HERE, "src", "sidepanel.js"),
    },
    format: "esm",
    outdir: OUT,
    external: ["./pyodide/*"],
  });
  await esbuild.build({
    ...common,
    // Folds the test switches away: the release build's scripts do not contain them.
    minifySyntax: true,
    entryPoints: {
      content: path.join(HERE, "src", "content.js"),
      guard: path.join(HERE, "src", "guard.js"),
      "offscreen-early": path.join(HERE, "src", "offscreen-early.js"),
    },
    format: "iife",
    outdir: OUT,
  });

  for (const file of fs.readdirSync(path.join(HERE, "static"))) {
    if (file === "manifest.json") continue;
    fs.copyFileSync(path.join(HERE, "static", file), path.join(OUT, file));
  }
  for (const size of [16, 32, 48, 128]) fs.writeFileSync(path.join(OUT, "icons", `icon${size}.png`), png(size, iconPixel));

  const { builtinMatchPatterns } = await import("./src/sites.js");
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8"));
  const manifest = JSON.parse(fs.readFileSync(path.join(HERE, "static", "manifest.json"), "utf8"));
  manifest.version = pkg.version;
  manifest.host_permissions = builtinMatchPatterns();
  // Both content scripts on every built-in site: content.js (Veil's isolated
  // world) and guard.js (the network guard, in the page's own world).
  for (const script of manifest.content_scripts) script.matches = builtinMatchPatterns();
  fs.writeFileSync(path.join(OUT, "manifest.json"), JSON.stringify(manifest, null, 2));
  fs.writeFileSync(path.join(OUT, "build-info.json"), JSON.stringify({ sourceHash: hash, pyodide: "314.0.7", builtAt: new Date().toISOString() }, null, 2));

  const files = walk(OUT).map((rel) => [rel.split(path.sep).join("/"), fs.readFileSync(path.join(OUT, rel))]);
  if (ZIP_OUT) fs.writeFileSync(ZIP_OUT, makeZip(files, { deflate: true }));
  const size = files.reduce((n, [, b]) => n + b.length, 0);
  const zipNote = ZIP_OUT ? ` and ${path.relative(ROOT, ZIP_OUT)}` : "";
  console.log(`built ${path.relative(ROOT, OUT)} (${files.length} files, ${(size / 1e6).toFixed(1)} MB)${zipNote} in ${((Date.now() - started) / 1000).toFixed(1)} s; source hash ${hash}`);
}

function isStale() {
  const info = path.join(OUT, "build-info.json");
  if (!fs.existsSync(info) || (ZIP_OUT && !fs.existsSync(ZIP_OUT))) return true;
  return JSON.parse(fs.readFileSync(info, "utf8")).sourceHash !== sourceHash();
}

if (process.argv.includes("--if-stale") && !isStale()) {
  console.log("build/extension is up to date");
} else {
  await build();
}
