// What `webview.postMessage(message)` costs in VS Code's extension host, step by step as
// VS Code 1.139 (code-server 4.139.1) does it, for the host benchmark (bench.ts):
// 1. extHostWebview `serializeWebviewMessage` (serializeBuffersForPostMessage: true, i.e. every
//    extension whose engine is ≥ 1.57): JSON.stringify with a replacer that turns ArrayBuffers
//    and typed arrays into references (called for every value of the message);
// 2. rpcProtocol `serializeRequestArguments` for `$postMessage(handle, json, ...buffers)`: without
//    buffers one JSON.stringify of the argument array (with the remote URI replacer), else
//    "mixed" arguments, each string JSON-encoded and each buffer copied as raw bytes;
// 3. VSBuffer.fromString of those strings (Buffer.from) and the copy into one message buffer.

const uriReplacer = (_k: string, v: any) => (v && v.$mid === 1 ? v : v);

/** Runs VS Code's serialisation of one posted message; returns the bytes it would send. */
export function vscodePostMessage(message: unknown): number {
  const buffers: ArrayBufferLike[] = [];
  const json = JSON.stringify(message, (_k, v) => {
    if (v instanceof ArrayBuffer) return { $$vscode_array_buffer_reference$$: true, index: buffers.push(v) - 1 };
    if (ArrayBuffer.isView(v)) return { $$vscode_array_buffer_reference$$: true, index: buffers.push(v.buffer) - 1, view: { type: 9, byteLength: v.byteLength, byteOffset: v.byteOffset } };
    return v;
  });
  if (buffers.length === 0) {
    const args = Buffer.from(JSON.stringify(["webview-handle", json], uriReplacer));
    const out = Buffer.allocUnsafe(args.length + 32);
    args.copy(out, 32);
    return out.length;
  }
  const parts = [Buffer.from(JSON.stringify("webview-handle", uriReplacer)), Buffer.from(JSON.stringify(json, uriReplacer)), ...buffers.map((b) => Buffer.from(new Uint8Array(b as ArrayBuffer)))];
  let size = 32;
  for (const p of parts) size += p.length + 5;
  const out = Buffer.allocUnsafe(size);
  let at = 32;
  for (const p of parts) {
    p.copy(out, at + 5);
    at += p.length + 5;
  }
  return size;
}
