// scripts/target.mjs: the targets scripts/package takes and the binary check it makes.
import { test } from "node:test";
import assert from "node:assert/strict";
// @ts-ignore: a plain .mjs script without types
import { TARGETS, identify, mismatch } from "../../scripts/target.mjs";

function elf(machine: number): Buffer {
  const b = Buffer.alloc(64);
  b.set([0x7f, 0x45, 0x4c, 0x46, 2, 1]);
  b.writeUInt16LE(machine, 18);
  return b;
}
function macho(cpu: number): Buffer {
  const b = Buffer.alloc(32);
  b.writeUInt32LE(0xfeedfacf, 0);
  b.writeUInt32LE(cpu, 4);
  return b;
}
function pe(machine: number): Buffer {
  const b = Buffer.alloc(0x100);
  b.set([0x4d, 0x5a]);
  b.writeUInt32LE(0x80, 0x3c);
  b.writeUInt32LE(0x00004550, 0x80);
  b.writeUInt16LE(machine, 0x84);
  return b;
}

test("the five targets and the binary name each ships", () => {
  assert.deepEqual(
    Object.fromEntries(Object.entries(TARGETS).map(([t, v]: [string, any]) => [t, v.bin])),
    { "linux-x64": "pi-lsp", "linux-arm64": "pi-lsp", "darwin-x64": "pi-lsp", "darwin-arm64": "pi-lsp", "win32-x64": "pi-lsp.exe" },
  );
});

test("a binary is checked against its target's format and machine", () => {
  assert.deepEqual(identify(elf(0x3e)), { format: "ELF", machine: "x86-64" });
  assert.deepEqual(identify(macho(0x0100000c)), { format: "Mach-O", machine: "arm64" });
  assert.deepEqual(identify(pe(0x8664)), { format: "PE", machine: "x86-64" });
  assert.equal(mismatch("linux-x64", elf(0x3e)), undefined);
  assert.equal(mismatch("linux-arm64", elf(0xb7)), undefined);
  assert.equal(mismatch("darwin-x64", macho(0x01000007)), undefined);
  assert.equal(mismatch("darwin-arm64", macho(0x0100000c)), undefined);
  assert.equal(mismatch("win32-x64", pe(0x8664)), undefined);
  assert.equal(mismatch("darwin-arm64", macho(0x01000007)), "a Mach-O x86-64 binary, not the Mach-O arm64 one darwin-arm64 needs");
  assert.equal(mismatch("win32-x64", elf(0x3e)), "a ELF x86-64 binary, not the PE x86-64 one win32-x64 needs");
  assert.equal(mismatch("linux-x64", Buffer.from("#!/bin/sh\n")), "not an executable (ELF, Mach-O or PE)");
  assert.equal(mismatch("win32-arm64", pe(0xaa64)), "unknown target win32-arm64 (one of: linux-x64, linux-arm64, darwin-x64, darwin-arm64, win32-x64)");
});
