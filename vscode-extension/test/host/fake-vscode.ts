// The part of the `vscode` API the host units reach (status bar items, notifications, editor
// tabs), recorded for assertions. The unit runner (scripts/unit-host.mjs) bundles it in place of
// `vscode`, which exists only inside VS Code's extension host.

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
