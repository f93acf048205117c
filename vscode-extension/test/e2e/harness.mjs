// The whole-extension harness: a workspace and a Pi agent dir in a temp folder, the loopback
// model (the `mock-model` binary on model-script.mjs's script), code-server 4.139.1 (Node 24)
// with the .vsix installed, and headless Chromium (playwright-core) on the workbench. Every
// tool it needs must exist: a missing one fails the test with what to install (scripts/test
// installs them).
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { script } from "./model-script.mjs";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

function need(name, value, hint) {
  if (!value || !fs.existsSync(value)) throw new Error(`${name} is missing (${value ?? "unset"}): ${hint}`);
  return value;
}

export function tools() {
  return {
    codeServer: need("CODE_SERVER_BIN", process.env.CODE_SERVER_BIN, "run scripts/install-code-server"),
    node24: need("CODE_SERVER_NODE", process.env.CODE_SERVER_NODE, "run scripts/install-code-server"),
    vsix: need("PI_VSIX", process.env.PI_VSIX, "run scripts/package"),
    piLsp: need("PI_LSP_BIN", process.env.PI_LSP_BIN, "cargo build --release -p pi-lsp"),
    chromium: need("chromium", process.env.CHROMIUM_BIN ?? "/usr/bin/chromium", "apt-get install -y chromium"),
    mockModel: need("PI_MOCK_MODEL_BIN", mockModelBin(), "cargo build -p pi-e2e --bin mock-model"),
  };
}

/** The `mock-model` binary: $PI_MOCK_MODEL_BIN, else found or built by tests/mock-model-path. */
function mockModelBin() {
  if (process.env.PI_MOCK_MODEL_BIN) return process.env.PI_MOCK_MODEL_BIN;
  const r = spawnSync(path.join(REPO, "tests/mock-model-path"), { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  if (r.status !== 0) throw new Error(`tests/mock-model-path failed (${r.status ?? r.error})`);
  return (process.env.PI_MOCK_MODEL_BIN = r.stdout.trim());
}

/** Starts the one loopback model (tests/bin/mock_model.rs) on model-script.mjs's script in
 * `dir`; every request body it gets is a line of `dir/requests.jsonl` (`requests`). */
async function startMockModel(bin, dir) {
  const scriptPath = path.join(dir, "model-script.json");
  const log = path.join(dir, "model-requests.jsonl");
  fs.writeFileSync(scriptPath, JSON.stringify(script()));
  const child = spawn(bin, [scriptPath, log], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((resolve, reject) => {
    let out = "";
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`mock-model exited (${code}) before it said its port`)));
    child.stdout.on("data", (d) => {
      out += d;
      const line = out.split("\n");
      if (line.length > 1) resolve(Number(line[0]));
    });
  });
  child.removeAllListeners("exit");
  const base = `http://127.0.0.1:${port}/v1`;
  return {
    baseUrl: base,
    /** Every request body so far, in order. */
    get requests() {
      return fs.existsSync(log) ? fs.readFileSync(log, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)) : [];
    },
    modelsJson() {
      return {
        providers: {
          mock: {
            baseUrl: base,
            api: "openai-completions",
            apiKey: "test-key",
            compat: { supportsDeveloperRole: false },
            models: [
              { id: "mock-1", name: "Mock One", contextWindow: 128000, maxTokens: 4096, cost: { input: 3, output: 15, cacheRead: 0, cacheWrite: 0 } },
              { id: "mock-think", name: "Mock Thinker", reasoning: true, contextWindow: 200000, maxTokens: 8192, cost: { input: 1, output: 5, cacheRead: 0, cacheWrite: 0 } },
            ],
          },
        },
      };
    },
    close: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitHttp(url, ms) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const r = await fetch(url);
      if (r.status < 500) return;
    } catch {}
    if (Date.now() > end) throw new Error(`${url} did not answer within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Starts everything; returns handles and helpers. `files` seeds the workspace; `extensions`:
 * more .vsix files installed beside ours (a test's own extension); `serverArgs`: more
 * code-server arguments, `env` more environment and `payload` the workbench URL's payload
 * (`[["inspect-extensions", PORT]]`: the extension host's inspector; scripts/profile-host.mjs). */
export async function startWorkbench({ files = {}, settings = {}, extensions = [], serverArgs = [], env: moreEnv = {}, payload = null } = {}) {
  const t = tools();
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "pi-vscode-e2e-"));
  const workspace = path.join(root, "workspace");
  const agentDir = path.join(root, "agent");
  const userData = path.join(root, "user-data");
  const extDir = path.join(root, "extensions");
  for (const d of [workspace, agentDir, path.join(userData, "User"), extDir]) fs.mkdirSync(d, { recursive: true });
  for (const [rel, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(workspace, rel)), { recursive: true });
    fs.writeFileSync(path.join(workspace, rel), text);
  }
  const model = await startMockModel(t.mockModel, root);
  fs.writeFileSync(path.join(agentDir, "models.json"), JSON.stringify(model.modelsJson(), null, 2));
  fs.writeFileSync(path.join(agentDir, "settings.json"), JSON.stringify({ defaultProvider: "mock", defaultModel: "mock-1" }, null, 2));
  fs.writeFileSync(
    path.join(userData, "User", "settings.json"),
    JSON.stringify(
      {
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": false,
        "workbench.colorTheme": "Default Dark Modern",
        "security.workspace.trust.enabled": false,
        "telemetry.telemetryLevel": "off",
        "extensions.autoCheckUpdates": false,
        "extensions.autoUpdate": false,
        "update.mode": "none",
        "chat.disableAIFeatures": true,
        "window.commandCenter": false,
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "files.autoSave": "off",
        "pi.serverPath": t.piLsp,
        ...settings,
      },
      null,
      2,
    ),
  );
  const statsPath = path.join(root, "host-stats.json");
  const env = { ...process.env, PATH: `${path.dirname(t.node24)}:${process.env.PATH}`, PI_CODING_AGENT_DIR: agentDir, PI_LSP_LOG: "info", PI_VSCODE_STATS: statsPath, ...moreEnv };
  delete env.VSCODE_IPC_HOOK_CLI;
  const install = spawnSync(t.codeServer, ["--user-data-dir", userData, "--extensions-dir", extDir, ...[t.vsix, ...extensions].flatMap((v) => ["--install-extension", v])], { env, encoding: "utf8", timeout: 120_000 });
  if (install.status !== 0) throw new Error(`installing the .vsix failed: ${install.stdout}\n${install.stderr}`);
  const port = await freePort();
  const log = fs.openSync(path.join(root, "code-server.log"), "w");
  const server = spawn(
    t.codeServer,
    ["--bind-addr", `127.0.0.1:${port}`, "--auth", "none", "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override", "--user-data-dir", userData, "--extensions-dir", extDir, ...serverArgs, workspace],
    { env, stdio: ["ignore", log, log], detached: true },
  );
  const url = `http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}${payload ? `&payload=${encodeURIComponent(JSON.stringify(payload))}` : ""}`;
  await waitHttp(`http://127.0.0.1:${port}/healthz`, 60_000);
  const browser = await chromium.launch({ executablePath: t.chromium, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"] });
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  await page.goto(url);
  await page.locator(".monaco-workbench").waitFor({ timeout: 60_000 });
  return {
    root,
    workspace,
    agentDir,
    model,
    page,
    browser,
    url,
    /** code-server's process (its group leader). */
    serverPid: server.pid,
    logPath: path.join(root, "code-server.log"),
    /** The extension host's relay figures, written after every run (PI_VSCODE_STATS). */
    stats: () => JSON.parse(fs.readFileSync(statsPath, "utf8")),
    async close() {
      await browser.close().catch(() => {});
      try {
        process.kill(-server.pid, "SIGTERM");
      } catch {}
      await new Promise((r) => setTimeout(r, 500));
      try {
        process.kill(-server.pid, "SIGKILL");
      } catch {}
      await model.close();
      if (!process.env.PI_E2E_KEEP) fs.rmSync(root, { recursive: true, force: true });
    },
  };
}

/** Runs a palette command by its title (retries opening the palette while a previous one is
 * still closing). */
export async function runCommand(page, title) {
  const input = page.locator(".quick-input-widget input");
  for (let attempt = 0; ; attempt++) {
    await page.keyboard.press("F1");
    try {
      await input.waitFor({ state: "visible", timeout: 5_000 });
      await input.fill(`>${title}`, { timeout: 5_000 });
      break;
    } catch (e) {
      if (attempt >= 3) throw e;
      await page.keyboard.press("Escape");
      await new Promise((r) => setTimeout(r, 300));
    }
  }
  await page.locator(".quick-input-list .monaco-list-row", { hasText: title }).first().waitFor({ timeout: 10_000 });
  await page.keyboard.press("Enter");
  await page.locator(".quick-input-widget").waitFor({ state: "hidden", timeout: 10_000 }).catch(() => {});
}

/** The active editor tab's file name. */
export async function activeTab(page) {
  return (await page.locator(".tabs-container .tab.active").first().getAttribute("aria-label"))?.split(",")[0].trim();
}

/** Every webview frame of the extension that shows the chat (has the composer). */
export async function chatFrames(page) {
  const out = [];
  for (const f of page.frames()) {
    try {
      if (await f.$('textarea[aria-label="Message"]')) out.push(f);
    } catch {}
  }
  return out;
}

/** Waits for a chat frame not in `except`. */
export async function waitChatFrame(page, { except = [], timeout = 60_000 } = {}) {
  const end = Date.now() + timeout;
  for (;;) {
    const fs = (await chatFrames(page)).filter((f) => !except.includes(f));
    if (fs.length) return fs[0];
    if (Date.now() > end) throw new Error("no chat webview frame appeared");
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Text of the visible editor (Monaco renders spaces as U+00A0). */
export async function editorText(page) {
  const lines = await page.locator(".editor-instance .monaco-editor .view-lines").first().evaluate((el) =>
    [...el.querySelectorAll(".view-line")].map((l) => ({ top: parseFloat(l.style.top) || 0, text: l.textContent ?? "" })),
  );
  return lines
    .sort((a, b) => a.top - b.top)
    .map((l) => l.text.replace(/\u00a0/g, " "))
    .join("\n");
}

/** Polls `fn` until it returns a truthy value. */
export async function until(what, fn, timeout = 30_000) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what} (last: ${String(last)})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
