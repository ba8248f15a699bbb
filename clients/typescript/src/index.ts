// amberdb's TypeScript client: `AmberClient` and its typed errors; `amberdb/langgraph` holds
// the LangGraph.js store.
export * from "./client.js";
export type * from "./generated.js";
export { COMMAND_CLASS } from "./generated.js";
