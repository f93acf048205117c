/**
 * A code block's buttons in the chat panel (`codeAction`, src/shared/messages.ts): copy to
 * VS Code's clipboard, insert at the active editor's selections (an ordinary, undoable edit;
 * the document is not saved: the user's unsaved text stays theirs), or open in a new untitled
 * document in the block's language.
 */
import * as vscode from "vscode";
import type { CodeActionMessage } from "../shared/messages";

/** Markdown fence names → VS Code language ids (the ones that differ). */
const LANGUAGES: Record<string, string> = {
  ts: "typescript",
  tsx: "typescriptreact",
  js: "javascript",
  jsx: "javascriptreact",
  py: "python",
  rs: "rust",
  sh: "shellscript",
  bash: "shellscript",
  zsh: "shellscript",
  shell: "shellscript",
  yml: "yaml",
  md: "markdown",
  rb: "ruby",
  "c++": "cpp",
  cs: "csharp",
  kt: "kotlin",
  golang: "go",
  text: "plaintext",
  txt: "plaintext",
};

/** The VS Code language id of a fence language (`plaintext` when none). */
export function languageId(fence: string): string {
  const f = fence.trim().toLowerCase();
  return f ? (LANGUAGES[f] ?? f) : "plaintext";
}

/** Does what the button asks; says in a notification when it cannot. */
export async function codeAction(m: CodeActionMessage): Promise<void> {
  switch (m.action) {
    case "copy":
      await vscode.env.clipboard.writeText(m.code);
      vscode.window.setStatusBarMessage("Pi: code copied", 2000);
      return;
    case "insert": {
      const ed = vscode.window.activeTextEditor ?? vscode.window.visibleTextEditors[0];
      if (!ed) {
        void vscode.window.showInformationMessage("Pi: no editor to insert the code into (open a file first).");
        return;
      }
      const ok = await ed.edit((b) => {
        for (const sel of ed.selections) b.replace(sel, m.code);
      });
      if (!ok) void vscode.window.showWarningMessage(`Pi: the code could not be inserted into ${vscode.workspace.asRelativePath(ed.document.uri)}.`);
      return;
    }
    case "newFile": {
      const known = await vscode.languages.getLanguages();
      const id = languageId(m.language);
      const doc = await vscode.workspace.openTextDocument({ content: m.code, language: known.includes(id) ? id : "plaintext" });
      await vscode.window.showTextDocument(doc, { preview: false });
      return;
    }
  }
}
