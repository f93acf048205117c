// The platform targets a .vsix is built for, and a check that a binary is one for the target
// (read from its header: ELF / Mach-O / PE and the machine), so a package never ships the wrong
// binary. Used by scripts/package; unit-tested in test/host/target.test.ts.
/** VS Code's target → the binary's file name in bin/, its format and machine. */
export const TARGETS = {
  "linux-x64": { bin: "pi-lsp", format: "ELF", machine: "x86-64" },
  "linux-arm64": { bin: "pi-lsp", format: "ELF", machine: "arm64" },
  "darwin-x64": { bin: "pi-lsp", format: "Mach-O", machine: "x86-64" },
  "darwin-arm64": { bin: "pi-lsp", format: "Mach-O", machine: "arm64" },
  "win32-x64": { bin: "pi-lsp.exe", format: "PE", machine: "x86-64" },
};

/** `{format, machine}` of an executable's first bytes, or undefined when it is none of the three. */
export function identify(buf) {
  if (buf.length >= 20 && buf[0] === 0x7f && buf[1] === 0x45 && buf[2] === 0x4c && buf[3] === 0x46) {
    const little = buf[5] === 1;
    const m = little ? buf.readUInt16LE(18) : buf.readUInt16BE(18);
    return { format: "ELF", machine: m === 0x3e ? "x86-64" : m === 0xb7 ? "arm64" : `0x${m.toString(16)}` };
  }
  if (buf.length >= 8 && buf.readUInt32LE(0) === 0xfeedfacf) {
    const cpu = buf.readUInt32LE(4);
    return { format: "Mach-O", machine: cpu === 0x01000007 ? "x86-64" : cpu === 0x0100000c ? "arm64" : `0x${cpu.toString(16)}` };
  }
  if (buf.length >= 0x40 && buf[0] === 0x4d && buf[1] === 0x5a) {
    const pe = buf.readUInt32LE(0x3c);
    if (buf.length >= pe + 6 && buf.readUInt32LE(pe) === 0x00004550) {
      const m = buf.readUInt16LE(pe + 4);
      return { format: "PE", machine: m === 0x8664 ? "x86-64" : m === 0xaa64 ? "arm64" : `0x${m.toString(16)}` };
    }
  }
  return undefined;
}

/** Why `buf` is not a binary for `target`, or undefined when it is. */
export function mismatch(target, buf) {
  const want = TARGETS[target];
  if (!want) return `unknown target ${target} (one of: ${Object.keys(TARGETS).join(", ")})`;
  const got = identify(buf);
  if (!got) return `not an executable (ELF, Mach-O or PE)`;
  if (got.format !== want.format || got.machine !== want.machine) {
    return `a ${got.format} ${got.machine} binary, not the ${want.format} ${want.machine} one ${target} needs`;
  }
  return undefined;
}
