// Generates src/generated.ts from amberdb's OpenAPI document (docs/openapi.json): for every
// command, its arguments' and its reply's TypeScript types, and the map from command name to
// both. Run `npm run generate` after `amberdb openapi > docs/openapi.json`; the test suite
// fails when the committed file is not what this prints.
//   node tools/generate.mjs OPENAPI.json OUT.ts   (OUT "-" prints)
import { readFileSync, writeFileSync } from "node:fs";

const [source, out] = process.argv.slice(2);
const doc = JSON.parse(readFileSync(source, "utf8"));

function tsType(schema) {
  if (!schema || Object.keys(schema).length === 0) return "unknown";
  const t = schema.type;
  if (Array.isArray(t)) return t.map((x) => tsType({ ...schema, type: x })).join(" | ");
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  switch (t) {
    case "string": return "string";
    case "integer":
    case "number": return "number";
    case "boolean": return "boolean";
    case "null": return "null";
    case "array": return `Array<${schema.items ? tsType(schema.items) : "unknown"}>`;
    case "object": {
      if (!schema.properties) return "Record<string, unknown>";
      return `{ ${objectFields(schema)} }`;
    }
    default: return "unknown";
  }
}

function objectFields(schema) {
  const required = new Set(schema.required ?? []);
  return Object.entries(schema.properties ?? {})
    .map(([k, v]) => `${JSON.stringify(k)}${required.has(k) ? "" : "?"}: ${tsType(v)};`)
    .join(" ");
}

function pascal(name) {
  return name.toLowerCase().split("_").map((w) => w[0].toUpperCase() + w.slice(1)).join("");
}

const commands = Object.keys(doc.paths)
  .filter((p) => p.startsWith("/v1/commands/"))
  .map((p) => [p.slice("/v1/commands/".length), doc.paths[p].post]);
const lines = [
  "// Generated from docs/openapi.json by tools/generate.mjs: do not edit.",
  `// amberdb ${doc.info.version}: ${commands.length} commands.`,
  "",
];
for (const [name, op] of commands) {
  const args = op.requestBody.content["application/json"].schema;
  const reply = doc.components.schemas[`${name}_reply`];
  const doc1 = op.summary.replace(/\*\//g, "* /");
  lines.push(`/** Arguments of ${name}: ${doc1} */`);
  lines.push(`export interface ${pascal(name)}Args {`);
  const required = new Set(args.required ?? []);
  for (const [k, v] of Object.entries(args.properties ?? {})) {
    if (v.description) lines.push(`  /** ${v.description.replace(/\*\//g, "* /")} */`);
    lines.push(`  ${JSON.stringify(k)}${required.has(k) ? "" : "?"}: ${tsType(v)};`);
  }
  lines.push("}", "");
  lines.push(`/** The reply of ${name}. */`);
  lines.push(`export interface ${pascal(name)}Reply {`);
  const rreq = new Set(reply.required ?? []);
  for (const [k, v] of Object.entries(reply.properties ?? {})) {
    lines.push(`  ${JSON.stringify(k)}${rreq.has(k) ? "" : "?"}: ${tsType(v)};`);
  }
  lines.push("}", "");
}
lines.push("/** Every command: its arguments and its reply. */");
lines.push("export interface Commands {");
for (const [name] of commands) lines.push(`  ${name}: [${pascal(name)}Args, ${pascal(name)}Reply];`);
lines.push("}", "");
lines.push("/** A command's name. */");
lines.push("export type CommandName = keyof Commands;", "");
lines.push("/** What each command touches (`read` commands are safe to send again). */");
lines.push("export const COMMAND_CLASS: Record<CommandName, string> = {");
for (const [name, op] of commands) lines.push(`  ${name}: ${JSON.stringify(op.tags[0])},`);
lines.push("};", "");
const text = lines.join("\n");
if (out === "-" || !out) process.stdout.write(text);
else writeFileSync(out, text);
