// A formatter for plain text (every letter upper-case) and a save participant of its own
// (onWillSaveTextDocument: counts the saves it saw in formatter-saves.txt next to the file), so
// the code-server suite can tell which saves ran the user's format-on-save.
const vscode = require("vscode");
const path = require("node:path");
const fs = require("node:fs");

exports.activate = (context) => {
  // Says it is active (the suite waits for it before the agent's edit).
  for (const f of vscode.workspace.workspaceFolders ?? []) fs.writeFileSync(path.join(f.uri.fsPath, ".formatter-active"), "");
  context.subscriptions.push(
    vscode.languages.registerDocumentFormattingEditProvider("plaintext", {
      provideDocumentFormattingEdits(doc) {
        const text = doc.getText();
        const upper = text.toUpperCase();
        if (upper === text) return [];
        return [vscode.TextEdit.replace(new vscode.Range(doc.positionAt(0), doc.positionAt(text.length)), upper)];
      },
    }),
    vscode.workspace.onWillSaveTextDocument((e) => {
      if (e.document.uri.scheme !== "file" || e.document.languageId !== "plaintext") return;
      const log = path.join(path.dirname(e.document.uri.fsPath), "formatter-saves.txt");
      if (e.document.uri.fsPath === log) return;
      fs.appendFileSync(log, `${path.basename(e.document.uri.fsPath)} reason=${e.reason}\n`);
    }),
  );
};
exports.deactivate = () => {};
