// The part of the `vscode` API the host units reach (status bar items, notifications, editor
// tabs), recorded for assertions. The unit runner (scripts/unit-host.mjs) bundles it in place of
// `vscode`, which exists only inside VS Code's extension host.

import { readFileSync, statSync, writeFileSync } from "node:fs";

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class StatusBarItem {
  text = "";
  tooltip: unknown = "";
  name = "";
  command: unknown;
  backgroundColor: unknown;
  shown = false;
  constructor(
    readonly id: string,
    readonly alignment: StatusBarAlignment,
    readonly priority: number,
  ) {}
  show(): void {
    this.shown = true;
  }
  hide(): void {
    this.shown = false;
  }
  dispose(): void {
    this.shown = false;
  }
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly path: string,
    readonly query: string,
  ) {}
  static from(c: { scheme: string; path?: string; query?: string }): Uri {
    return new Uri(c.scheme, c.path ?? "", c.query ?? "");
  }
  static file(p: string): Uri {
    return new Uri("file", p, "");
  }
  static parse(s: string): Uri {
    const m = /^([a-z-]+):([^?]*)(?:\?(.*))?$/.exec(s);
    return m ? new Uri(m[1], m[2], m[3] ?? "") : new Uri("file", s, "");
  }
  toString(): string {
    return `${this.scheme}:${this.path}${this.query ? `?${this.query}` : ""}`;
  }
  get fsPath(): string {
    return this.path;
  }
}

export class TabInputText {
  constructor(readonly uri: Uri) {}
}

export class TabInputTextDiff {
  constructor(
    readonly original: Uri,
    readonly modified: Uri,
  ) {}
}

export interface Tab {
  label: string;
  input: unknown;
  isActive: boolean;
}

/** What the tests see of the calls. */
export const recorded = {
  messages: [] as { kind: "info" | "warning" | "error"; text: string; items?: string[] }[],
  /** Clicks a button of the next warning notification: the label to answer it with (undefined:
   * closed without one). Unset: notifications are never answered. */
  clickWarning: undefined as ((text: string, items: string[]) => string | undefined) | undefined,
  /** Tabs closed, with the `preserveFocus` argument. */
  closed: [] as { label: string; preserveFocus: boolean | undefined }[],
  statusItems: [] as StatusBarItem[],
};

/** The editor tabs, one group; tests push and read them. */
export const tabs: Tab[] = [];

export function reset(): void {
  recorded.messages.length = 0;
  recorded.clickWarning = undefined;
  recorded.closed.length = 0;
  recorded.statusItems.length = 0;
  tabs.length = 0;
}

export const window = {
  createStatusBarItem(id: string, alignment: StatusBarAlignment, priority: number): StatusBarItem {
    const item = new StatusBarItem(id, alignment, priority);
    recorded.statusItems.push(item);
    return item;
  },
  showInformationMessage(text: string): Promise<undefined> {
    recorded.messages.push({ kind: "info", text });
    return Promise.resolve(undefined);
  },
  showWarningMessage(text: string, ...items: string[]): Promise<string | undefined> {
    recorded.messages.push(items.length ? { kind: "warning", text, items } : { kind: "warning", text });
    const click = recorded.clickWarning;
    if (!click || !items.length) return items.length ? new Promise(() => {}) : Promise.resolve(undefined);
    return Promise.resolve(click(text, items));
  },
  showErrorMessage(text: string): Promise<undefined> {
    recorded.messages.push({ kind: "error", text });
    return Promise.resolve(undefined);
  },
  tabGroups: {
    get all() {
      return [{ tabs: [...tabs] }];
    },
    close(tab: Tab | Tab[], preserveFocus?: boolean): Promise<boolean> {
      for (const t of Array.isArray(tab) ? tab : [tab]) {
        const i = tabs.indexOf(t);
        if (i < 0) throw new Error(`closing a tab that is not open: ${t.label}`);
        tabs.splice(i, 1);
        recorded.closed.push({ label: t.label, preserveFocus });
      }
      return Promise.resolve(true);
    },
  },
};

/** `workspace.onWillSaveTextDocument` listeners; tests fire a save with `willSave`. */
const willSave: ((e: { document: { uri: Uri } }) => void)[] = [];
export function willSaveDocument(uri: Uri): void {
  for (const f of willSave) f({ document: { uri } });
}

export const workspace = {
  onWillSaveTextDocument(f: (e: { document: { uri: Uri } }) => void) {
    willSave.push(f);
    return { dispose: () => willSave.splice(willSave.indexOf(f), 1) };
  },
};

// --- What the Changes view (src/extension/changes.ts) reaches ---------------------------------

export class EventEmitter<T> {
  private readonly listeners: ((e: T) => void)[] = [];
  readonly event = (f: (e: T) => void) => {
    this.listeners.push(f);
    return { dispose: () => this.listeners.splice(this.listeners.indexOf(f), 1) };
  };
  fire(e: T): void {
    for (const f of [...this.listeners]) f(e);
  }
  dispose(): void {
    this.listeners.length = 0;
  }
}

export enum OverviewRulerLane {
  Left = 1,
}

export enum TreeItemCollapsibleState {
  None = 0,
  Collapsed = 1,
  Expanded = 2,
}

export enum TextDocumentChangeReason {
  Undo = 1,
  Redo = 2,
}

export class ThemeIcon {
  constructor(readonly id: string) {}
}

export class TreeItem {
  description?: string;
  tooltip?: unknown;
  iconPath?: unknown;
  contextValue?: string;
  command?: unknown;
  resourceUri?: unknown;
  constructor(
    readonly label: string | Uri,
    readonly collapsibleState?: TreeItemCollapsibleState,
  ) {}
}

/** An open text document held in memory: tests change it with {@link editDocument}. */
export interface FakeDocument {
  uri: Uri;
  version: number;
  text: string;
  /** Unsaved changes; `save()` writes the text to `uri.fsPath` and clears it. */
  isDirty: boolean;
  saves: number;
  getText(): string;
  positionAt(offset: number): { offset: number };
  save(): Promise<boolean>;
}

/** Open documents by URI string. */
export const documents = new Map<string, FakeDocument>();
const docChanges: ((e: { document: FakeDocument; contentChanges: unknown[]; reason?: number }) => void)[] = [];

/** Opens (or replaces) an in-memory document. */
export function openDocument(uri: Uri, text: string): FakeDocument {
  const d: FakeDocument = {
    uri,
    version: 1,
    text,
    isDirty: false,
    saves: 0,
    getText: () => d.text,
    positionAt: (offset) => ({ offset }),
    save: () => {
      writeFileSync(uri.fsPath, d.text);
      d.isDirty = false;
      d.saves++;
      return Promise.resolve(true);
    },
  };
  documents.set(uri.toString(), d);
  return d;
}

/** Replaces a document's whole text and fires `onDidChangeTextDocument`. */
export function editDocument(uri: Uri, text: string): void {
  const d = documents.get(uri.toString());
  if (!d) throw new Error(`no open document ${uri.toString()}`);
  const old = d.text;
  d.text = text;
  d.version++;
  d.isDirty = true;
  for (const f of [...docChanges]) f({ document: d, contentChanges: [{ rangeOffset: 0, rangeLength: old.length, text }] });
}

export class Range {
  readonly args: unknown[];
  constructor(...args: unknown[]) {
    this.args = args;
  }
}

/** Replacements by offset (positions from {@link FakeDocument.positionAt}). */
export class WorkspaceEdit {
  readonly edits: { uri: Uri; start: number; end: number; text: string }[] = [];
  replace(uri: Uri, range: Range, text: string): void {
    const [s, e] = range.args as { offset: number }[];
    this.edits.push({ uri, start: s!.offset, end: e!.offset, text });
  }
}

Object.assign(window, {
  visibleTextEditors: [],
  activeTextEditor: undefined,
  createTextEditorDecorationType: () => ({ dispose() {} }),
  onDidChangeVisibleTextEditors: () => ({ dispose() {} }),
});

Object.assign(workspace, {
  workspaceFolders: undefined,
  textDocuments: [] as FakeDocument[],
  onDidChangeTextDocument(f: (e: { document: FakeDocument; contentChanges: unknown[] }) => void) {
    docChanges.push(f);
    return { dispose: () => docChanges.splice(docChanges.indexOf(f), 1) };
  },
  openTextDocument(uri: Uri): Promise<FakeDocument> {
    const d = documents.get(uri.toString());
    return d ? Promise.resolve(d) : Promise.reject(new Error(`no such document ${uri.toString()}`));
  },
  /** Applies a {@link WorkspaceEdit} to the open documents, one change event per replacement. */
  applyEdit(edit: WorkspaceEdit): Promise<boolean> {
    for (const r of [...edit.edits].sort((x, y) => y.start - x.start)) {
      const d = documents.get(r.uri.toString());
      if (!d) return Promise.resolve(false);
      d.text = d.text.slice(0, r.start) + r.text + d.text.slice(r.end);
      d.version++;
      d.isDirty = true;
      for (const f of [...docChanges]) f({ document: d, contentChanges: [{ rangeOffset: r.start, rangeLength: r.end - r.start, text: r.text }] });
    }
    return Promise.resolve(true);
  },
  asRelativePath(u: Uri | string): string {
    return typeof u === "string" ? u : u.path.replace(/^\/w\//, "");
  },
});

/** `onDidDelete` listeners of every `createFileSystemWatcher`; tests report a deletion with
 * {@link fileDeleted}. */
const deleteListeners: ((uri: Uri) => void)[] = [];
export function fileDeleted(uri: Uri): void {
  for (const f of [...deleteListeners]) f(uri);
}

Object.assign(workspace, {
  createFileSystemWatcher() {
    return {
      onDidDelete(f: (uri: Uri) => void) {
        deleteListeners.push(f);
        return { dispose: () => deleteListeners.splice(deleteListeners.indexOf(f), 1) };
      },
      dispose() {},
    };
  },
});

/** Whether `workspace.fs.writeFile` reloads a clean open document of the file (as VS Code's
 * file watcher does), a moment later; tests switch it off to see the fallback. */
export const fsWatch = { reload: true, writes: 0 };

Object.assign(workspace, {
  /** Real files; a write reloads a clean open document of the file a tick later with one
   * whole-text change event (no reason), as VS Code reloads a document changed on disk. */
  fs: {
    stat(uri: Uri): Promise<{ size: number }> {
      try {
        return Promise.resolve({ size: statSync(uri.fsPath).size });
      } catch (e) {
        return Promise.reject(e);
      }
    },
    readFile(uri: Uri): Promise<Uint8Array> {
      return Promise.resolve(new Uint8Array(readFileSync(uri.fsPath)));
    },
    writeFile(uri: Uri, bytes: Uint8Array): Promise<void> {
      writeFileSync(uri.fsPath, bytes);
      fsWatch.writes++;
      if (fsWatch.reload) {
        setTimeout(() => {
          const d = documents.get(uri.toString());
          const text = new TextDecoder().decode(bytes);
          if (!d || d.isDirty || d.text === text) return;
          const old = d.text;
          d.text = text;
          d.version++;
          for (const f of [...docChanges]) f({ document: d, contentChanges: [{ rangeOffset: 0, rangeLength: old.length, text }] });
        }, 5);
      }
      return Promise.resolve();
    },
  },
});

/** Fires an editor Undo / Redo (`reason`) that makes the document `text` (dirty, as an undo
 * past the last load is): one change event of the lines that differ, as the editor sends it. */
export function undoDocument(uri: Uri, text: string, reason: number): void {
  const d = documents.get(uri.toString());
  if (!d) throw new Error(`no open document ${uri.toString()}`);
  const old = d.text;
  let p = 0;
  while (p < old.length && p < text.length && old[p] === text[p]) p++;
  p = old.lastIndexOf("\n", p - 1) + 1;
  let q = 0;
  while (q < old.length - p && q < text.length - p && old[old.length - 1 - q] === text[text.length - 1 - q]) q++;
  // Whole lines: the suffix starts after a line break.
  while (q > 0 && old[old.length - q - 1] !== "\n") q--;
  d.text = text;
  d.version++;
  d.isDirty = true;
  const change = { rangeOffset: p, rangeLength: old.length - q - p, text: text.slice(p, text.length - q) };
  for (const f of [...docChanges]) f({ document: d, contentChanges: [change], reason });
}

export const commands = {
  executeCommand: (): Promise<undefined> => Promise.resolve(undefined),
};
