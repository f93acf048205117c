/**
 * The chat webview's HTML page with its Content-Security-Policy: no remote resources at all,
 * scripts only by nonce, styles only from the extension (`cspSource`), images only from the
 * extension or `data:` URIs. The host calls it with `webview.asWebviewUri(...)` of
 * `dist/webview.js` / `dist/webview.css`, `webview.cspSource` and a fresh random nonce; the
 * browser tests call it with their own origin.
 */
export interface WebviewHtmlOptions {
  scriptUri: string;
  styleUri: string;
  /** `webview.cspSource` (the origin the extension's files are served from). */
  cspSource: string;
  /** A fresh random string per page load (at least 128 bits, base64 or hex). */
  nonce: string;
  title?: string;
}

function attr(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
}

export function webviewHtml(o: WebviewHtmlOptions): string {
  const csp = [
    "default-src 'none'",
    `img-src ${o.cspSource} data:`,
    `style-src ${o.cspSource}`,
    `font-src ${o.cspSource}`,
    `script-src 'nonce-${o.nonce}'`,
  ].join("; ");
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${attr(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${attr(o.styleUri)}">
<title>${attr(o.title ?? "Pi")}</title>
</head>
<body>
<script nonce="${attr(o.nonce)}" src="${attr(o.scriptUri)}"></script>
</body>
</html>
`;
}
