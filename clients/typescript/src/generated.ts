// Generated from docs/openapi.json by tools/generate.mjs: do not edit.
// amberdb 0.6.0: 56 commands.

/** Arguments of PING: Replies PONG. */
export interface PingArgs {
}

/** The reply of PING. */
export interface PingReply {
  "reply": string;
}

/** Arguments of HELP: Lists the commands, or one command's arguments. */
export interface HelpArgs {
  /** a command name */
  "command"?: string;
}

/** The reply of HELP. */
export interface HelpReply {
  "commands"?: Array<unknown>;
  "usage"?: string;
  "command"?: string;
  "alias"?: string | null;
  "summary"?: string;
  "class"?: string;
  "arguments"?: Array<unknown>;
}

/** Arguments of AUTH: Authenticates the connection: AUTH <token> or AUTH {"token": ...}. */
export interface AuthArgs {
  /** the shared secret, or a user-bound token */
  "token": string;
}

/** The reply of AUTH. */
export interface AuthReply {
  "reply": string;
  "message"?: string;
  "user_id"?: string | null;
  "read_only"?: boolean;
}

/** Arguments of QUIT: Closes the connection after the reply. */
export interface QuitArgs {
}

/** The reply of QUIT. */
export interface QuitReply {
  "reply": string;
}

/** Arguments of STATS: Server counters (requests, errors, latency quantiles, connections) and the store's size. */
export interface StatsArgs {
}

/** The reply of STATS. */
export interface StatsReply {
  "store"?: Record<string, unknown>;
  "cluster"?: Record<string, unknown>;
  "uptime_seconds": number;
  "version": string;
  "requests": number;
  "errors": number;
  "errors_by_code": Record<string, unknown>;
  "requests_by_command": Record<string, unknown>;
  "latency": Record<string, unknown>;
  "connections": Record<string, unknown>;
  "bytes_in": number;
  "bytes_out": number;
  "admission": Record<string, unknown>;
}

/** Arguments of PURGE: Makes every deleted memory leave the store's files now (texts, tags, vectors) and says what it removed. */
export interface PurgeArgs {
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of PURGE. */
export interface PurgeReply {
  "purged": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of BACKUP: Copies the store, as it is at one commit, into an empty directory on the server's machine while it serves, and checks the copy. */
export interface BackupArgs {
  /** an absolute path: a new or empty directory outside the store */
  "dest": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of BACKUP. */
export interface BackupReply {
  "backup": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of EXPORT: Writes every entity and record, live and archived, with ids, lineage and validity, as one state of the store, to a new file on the server's machine. */
export interface ExportArgs {
  /** an absolute path of a new file on the server's machine: every entity and record (live and archived), as one state */
  "dest": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of EXPORT. */
export interface ExportReply {
  "export": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of IMPORT: Reads an export (ids kept when this store never gave them out), JSON Lines of memories, or mem0's / agent-memory-server's JSON from a file on the server's machine. */
export interface ImportArgs {
  /** an absolute path of a file on the server's machine: an export (EXPORT, amberdb export), JSON Lines of memories, or mem0's / agent-memory-server's JSON */
  "source": string;
  /** cluster mode only (amberdb cluster import sends it): the partition every user of the export belongs to; the partition's owner imports it, once every line is checked */
  "partition"?: number;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of IMPORT. */
export interface ImportReply {
  "import": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of MAINTENANCE: Pauses or resumes the store's automatic checkpoints, purges and archive retention, and says what they did. */
export interface MaintenanceArgs {
  /** true pauses, false resumes; absent only reports */
  "paused"?: boolean;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of MAINTENANCE. */
export interface MaintenanceReply {
  "maintenance": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of REEMBED: Moves the store to another embedder from its stored texts while it serves (new vectors staged, one switch, old vectors purged); replies when done. */
export interface ReembedArgs {
  /** minilm (from AMBERDB_MODEL_DIR or ~/.cache/amberdb/all-MiniLM-L6-v2), bge-small (from ~/.cache/amberdb/bge-small-en-v1.5) or hashing (384-d) */
  "embedder"?: string;
  /** true drops what an interrupted re-embedding staged; default false */
  "cancel"?: boolean;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of REEMBED. */
export interface ReembedReply {
  "reembed": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of STORE_MEMORY: Stores a memory through the hooks (tags, category, exact and semantic dedup). */
export interface StoreMemoryArgs {
  /** the text, at most 10,000 characters */
  "content": string;
  /** one of the nine categories, or text the category hook maps; other when left out and the hook finds none */
  "category"?: string;
  /** at most 10 tags of at most 100 characters */
  "tags"?: Array<string>;
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** a session of the user (create it first) */
  "session_id"?: string;
  /** an agent of the user (create it first) */
  "agent_id"?: string;
  /** memory (default), message or knowledge */
  "kind"?: string;
  /** a message's role: user, assistant or system */
  "role"?: string;
  /** from when the statement holds (RFC 3339 or a date); default now */
  "valid_from"?: string;
  /** until when it holds (RFC 3339 or a date); default open */
  "valid_to"?: string;
  /** write hooks off for this request: tags, category, exact_dedup, semantic_dedup */
  "skip_hooks"?: Array<string>;
  /** write hooks on for this request */
  "force_hooks"?: Array<string>;
  /** store-time semantic dedup cosine distance, (0, 2); default the embedder's (MiniLM: 0.35) */
  "dedup_distance"?: number;
  /** which near duplicates semantic dedup merges: sure (default) or paraphrases */
  "merge"?: string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of STORE_MEMORY. */
export interface StoreMemoryReply {
  "memory_id": number;
  "outcome": string;
  "content_preview": string;
  "category": string;
  "category_reason": string;
  "tags": Array<unknown>;
  "new_canonical_tags": Array<unknown>;
  "created_at": string;
  "valid_from": string;
  "supersedes": Array<unknown>;
  "dedup_candidates": number;
  "decisions": Array<unknown>;
  "success": boolean;
  "message": string;
  "reason"?: string;
  "replaced"?: number;
  "partition": number;
  "seq": number;
}

/** Arguments of LIST_RECENT_MEMORIES: The user's most recently created records, newest first, by kind, category, tags, session, validity or archive. */
export interface ListRecentMemoriesArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** a page's most memories; default 10 */
  "limit"?: number;
  /** memories to skip, newest first (paging: offset += limit while has_more); default 0 */
  "offset"?: number;
  /** only memory, message, knowledge or item */
  "kind"?: string;
  /** only this category */
  "category"?: string;
  /** only records with any of these tags */
  "tags"?: Array<string>;
  /** only this session's records */
  "session_id"?: string;
  /** true: only statements that hold now; false: only those whose validity ended or has not begun */
  "valid"?: boolean;
  /** live (default), archived (what merges, updates and compactions archived) or all */
  "archived"?: string;
}

/** The reply of LIST_RECENT_MEMORIES. */
export interface ListRecentMemoriesReply {
  "success": boolean;
  "total": number;
  "offset": number;
  "has_more": boolean;
  "count": number;
  "message": string;
  "memories": Array<unknown>;
}

/** Arguments of GET_BY_MEMORY_ID: One memory by id (counted as an access). */
export interface GetByMemoryIdArgs {
  /** a memory's id (≥ 1) */
  "memory_id": number;
}

/** The reply of GET_BY_MEMORY_ID. */
export interface GetByMemoryIdReply {
  "success": boolean;
  "memory": Record<string, unknown>;
}

/** Arguments of DELETE_BY_MEMORY_ID: Deletes a memory for good. */
export interface DeleteByMemoryIdArgs {
  /** a memory's id (≥ 1) */
  "memory_id": number;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of DELETE_BY_MEMORY_ID. */
export interface DeleteByMemoryIdReply {
  "success": boolean;
  "memory_id": number;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of UPDATE_MEMORY: Changes a memory's content, category or tags (new content gets a new id that supersedes the old). */
export interface UpdateMemoryArgs {
  /** a memory's id (≥ 1) */
  "memory_id": number;
  /** new text */
  "content"?: string;
  /** new category */
  "category"?: string;
  /** new tags */
  "tags"?: Array<string>;
  /** write hooks off for this request: tags, category, exact_dedup, semantic_dedup */
  "skip_hooks"?: Array<string>;
  /** write hooks on for this request */
  "force_hooks"?: Array<string>;
  /** store-time semantic dedup cosine distance, (0, 2); default the embedder's (MiniLM: 0.35) */
  "dedup_distance"?: number;
  /** which near duplicates semantic dedup merges: sure (default) or paraphrases */
  "merge"?: string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of UPDATE_MEMORY. */
export interface UpdateMemoryReply {
  "memory_id": number;
  "supersedes": Array<unknown>;
  "tags": Array<unknown>;
  "category": string;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of FEEDBACK: Marks a memory helpful or harmful (moves its confidence). */
export interface FeedbackArgs {
  /** a memory's id (≥ 1) */
  "memory_id": number;
  /** helpful or harmful */
  "feedback": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of FEEDBACK. */
export interface FeedbackReply {
  "memory_id": number;
  "helpful_count": number;
  "harmful_count": number;
  "confidence": number;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of LINEAGE: The archived records a memory merged, superseded or replaced. */
export interface LineageArgs {
  /** a memory's id (≥ 1) */
  "memory_id": number;
}

/** The reply of LINEAGE. */
export interface LineageReply {
  "success": boolean;
  "memory_id": number;
  "count": number;
  "lineage": Array<unknown>;
}

/** Arguments of HISTORY: A fact's versions with their validity, newest first (replaced values included). */
export interface HistoryArgs {
  /** a memory's id (≥ 1) */
  "memory_id": number;
}

/** The reply of HISTORY. */
export interface HistoryReply {
  "memory_id": number;
  "versions": Array<unknown>;
  "count": number;
  "success": boolean;
  "message": string;
}

/** Arguments of GET_MEMORY_STATS: The user's counts, categories, size and health (vector-memory-mcp's stats). */
export interface GetMemoryStatsArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
}

/** The reply of GET_MEMORY_STATS. */
export interface GetMemoryStatsReply {
  "total_memories": number;
  "store_memories": number;
  "memory_limit": number;
  "usage_percentage": number;
  "categories": Record<string, unknown>;
  "recent_week_count": number;
  "database_size_mb": number;
  "embedding_model": string;
  "embedding_dimensions": number;
  "top_accessed": Array<unknown>;
  "health_status": string;
  "archived": number;
  "success": boolean;
  "message": string;
}

/** Arguments of CLEAR_OLD_MEMORIES: Deletes the least-accessed memories older than days_old, keeping max_to_keep. */
export interface ClearOldMemoriesArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** memories older than this many days; default 30 */
  "days_old"?: number;
  /** the most memories kept; default 1000 */
  "max_to_keep"?: number;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of CLEAR_OLD_MEMORIES. */
export interface ClearOldMemoriesReply {
  "deleted_count": number;
  "deleted_ids": Array<unknown>;
  "remaining_count": number;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of COMPACT_PREVIEW: Groups of near-duplicate memories that compaction would merge. */
export interface CompactPreviewArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** cosine distance; default 0.20 */
  "distance"?: number;
}

/** The reply of COMPACT_PREVIEW. */
export interface CompactPreviewReply {
  "preview_id": string;
  "groups": Array<unknown>;
  "memories_before": number;
  "memories_after": number;
  "success": boolean;
  "message": string;
}

/** Arguments of COMPACT_APPLY: Merges a preview's groups (each merge keeps its sources in lineage). */
export interface CompactApplyArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** as in the preview */
  "distance"?: number;
  /** from COMPACT_PREVIEW */
  "preview_id": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of COMPACT_APPLY. */
export interface CompactApplyReply {
  "merged": Array<unknown>;
  "skipped": number;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of COMPACT_UNDO: Undoes one merge: its sources come back. */
export interface CompactUndoArgs {
  /** a memory's id (≥ 1) */
  "memory_id": number;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of COMPACT_UNDO. */
export interface CompactUndoReply {
  "archived": number;
  "restored": Array<unknown>;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of MEND_PREVIEW: Archived memories that older dedup rules put away and this build's rules would keep live. */
export interface MendPreviewArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
}

/** The reply of MEND_PREVIEW. */
export interface MendPreviewReply {
  "preview_id": string;
  "restore": Array<unknown>;
  "kept": number;
  "success": boolean;
  "message": string;
}

/** Arguments of MEND_APPLY: Brings back a mend preview's memories, in one frame. */
export interface MendApplyArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** from MEND_PREVIEW */
  "preview_id": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of MEND_APPLY. */
export interface MendApplyReply {
  "restored": Array<unknown>;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of MEND_UNDO: Archives one memory mend brought back again. */
export interface MendUndoArgs {
  /** a memory's id (≥ 1) */
  "memory_id": number;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of MEND_UNDO. */
export interface MendUndoReply {
  "archived": number;
  "original": number;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of SEARCH_MEMORIES: Searches a user's memories by meaning, keywords or text (docs/search.md). */
export interface SearchMemoriesArgs {
  /** what to look for, at most 1,000 characters */
  "query": string;
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** results per page; default 10 */
  "limit"?: number;
  /** results to skip; default 0 */
  "offset"?: number;
  /** composite (default), similarity, recency, frequency, importance */
  "strategy"?: string;
  /** hybrid (default; vector with strategy similarity and over MCP), vector, keyword, text */
  "mode"?: string;
  /** least cosine of a vector candidate; default none (the limit best) */
  "threshold"?: number;
  /** hybrid's fusion: weighted (default) or rrf */
  "fusion"?: string;
  /** weighted fusion's vector weight; default 0.9 for a statement of 5+ words that asks no question, else 0.7 */
  "vector_weight"?: number;
  /** weighted fusion's keyword weight; default 0.1 for a statement of 5+ words that asks no question, else 0.3 */
  "keyword_weight"?: number;
  /** rrf's rank offset; default 60 */
  "rrf_k"?: number;
  /** only this category */
  "category"?: string;
  /** only memories with any of these tags */
  "tags"?: Array<string>;
  /** only memory, message, knowledge or item */
  "kind"?: string;
  /** only this session's records */
  "session_id"?: string;
  /** only this agent's records */
  "agent_id"?: string;
  /** only created at or after (RFC 3339 or a date) */
  "created_after"?: string;
  /** only created before (RFC 3339 or a date) */
  "created_before"?: string;
  /** only about a moment at or after (a chat turn's time, a fact's valid_from; RFC 3339 or a date) */
  "valid_after"?: string;
  /** only about a moment before (valid_from; RFC 3339 or a date) */
  "valid_before"?: string;
  /** what was valid at this moment (RFC 3339 or a date); default now */
  "as_of"?: string;
  /** a prompt's token budget: the best results that fit, counted by the model's tokenizer */
  "max_tokens"?: number;
  /** each result in a session carries this many records before and after it (context); default 0 */
  "neighbours"?: number;
  /** fold near-identical results; default on */
  "deduplicate"?: boolean;
  /** load-time cluster distance; default 0.40 */
  "dedup_threshold"?: number;
  /** what load-time dedup folds: duplicates (default: one statement in the same words; the page stays in score order) or slots (older values of a fact folded, the newest first) */
  "fold"?: string;
  /** lists of each IVF segment to probe first; default: what the build measured for its recall target (docs/ivf.md) */
  "nprobe"?: number;
  /** probe the lists whose measured recall@10 reached this, in (0, 1]; not with nprobe */
  "recall"?: number;
  /** count the returned memories as accessed; default on */
  "count_access"?: boolean;
  /** rescore the first candidates with the cross-encoder and order the page by its score; default off (slower: docs/search.md, Reranking) */
  "rerank"?: boolean;
  /** how many first candidates the cross-encoder rescores (at least the page's end); default 20 */
  "rerank_candidates"?: number;
  /** records (default) or session: one result per session (its best record; its other records in session_turns), limit counts sessions */
  "group"?: string;
  /** 0..1 (default 0.1) added to a record whose time falls in a date or relative time the query names (relative to as_of, else now); 0 turns it off (docs/search.md, Dates in questions) */
  "date_boost"?: number;
  /** 0..1 (default 0.1): each record gains this share of the best score of another record of its session; 0 turns it off (docs/search.md, Sessions) */
  "session_lend"?: number;
}

/** The reply of SEARCH_MEMORIES. */
export interface SearchMemoriesReply {
  "results": Array<unknown>;
  "count": number;
  "total": number;
  "folded_total": number;
  "tokens"?: number;
  "over_budget"?: number;
  "strategy": string;
  "mode": string;
  "scored_by": string;
  "fallback": string | null;
  "success": boolean;
  "message": string;
  "query": string;
  "offset": number;
  "limit": number;
  "has_more": boolean;
}

/** Arguments of QUERY: MemFuse's query across a user's sessions, in MemFuse's envelope. */
export interface QueryArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** what to look for */
  "query": string;
  /** marks results in_session / cross_session (does not narrow) */
  "session_id"?: string;
  /** only this agent's records (and knowledge) */
  "agent_id"?: string;
  /** default 5 */
  "top_k"?: number;
  /** a prompt's token budget: the best results that fit */
  "max_tokens"?: number;
  /** vector (default), keyword, hybrid, graph */
  "store_type"?: string;
  /** default true */
  "include_messages"?: boolean;
  /** default true */
  "include_knowledge"?: boolean;
  /** rescore the first candidates with the cross-encoder and order the page by its score; default off (slower: docs/search.md, Reranking) */
  "rerank"?: boolean;
  /** how many first candidates the cross-encoder rescores (at least the page's end); default 20 */
  "rerank_candidates"?: number;
}

/** The reply of QUERY. */
export interface QueryReply {
  "status": string;
  "errors": Array<unknown> | null;
  "data": Record<string, unknown>;
  "message": string;
  "status_code": number;
}

/** Arguments of GET_UNIQUE_TAGS: The tags on the user's memories, sorted. */
export interface GetUniqueTagsArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
}

/** The reply of GET_UNIQUE_TAGS. */
export interface GetUniqueTagsReply {
  "success": boolean;
  "count": number;
  "tags": Array<unknown>;
}

/** Arguments of GET_CANONICAL_TAGS: The user's canonical tags, sorted. */
export interface GetCanonicalTagsArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
}

/** The reply of GET_CANONICAL_TAGS. */
export interface GetCanonicalTagsReply {
  "success": boolean;
  "count": number;
  "tags": Array<unknown>;
}

/** Arguments of GET_TAG_FREQUENCIES: {tag: memories using it}. */
export interface GetTagFrequenciesArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
}

/** The reply of GET_TAG_FREQUENCIES. */
export interface GetTagFrequenciesReply {
  "success": boolean;
  "count": number;
  "frequencies": Record<string, unknown>;
}

/** Arguments of GET_TAG_WEIGHTS: {tag: 1/ln(1+frequency)}: rare tags weigh more. */
export interface GetTagWeightsArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
}

/** The reply of GET_TAG_WEIGHTS. */
export interface GetTagWeightsReply {
  "success": boolean;
  "count": number;
  "weights": Record<string, unknown>;
}

/** Arguments of TAG_NORMALIZE_PREVIEW: Which tags would map to canonical ones (nothing changes). */
export interface TagNormalizePreviewArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** least similarity of a tag to its canonical one; default 0.8999999761581421 */
  "threshold"?: number;
  /** most mappings; default 200 */
  "max_changes"?: number;
}

/** The reply of TAG_NORMALIZE_PREVIEW. */
export interface TagNormalizePreviewReply {
  "preview_id": string;
  "scanned": number;
  "unique_before": number;
  "unique_after": number;
  "planned_updates": number;
  "affected_memories": number;
  "changes": Array<unknown>;
  "success": boolean;
  "message": string;
}

/** Arguments of TAG_NORMALIZE_APPLY: Applies a preview's mapping (needs a snapshot to undo it), in one commit. */
export interface TagNormalizeApplyArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** from TAG_NORMALIZE_PREVIEW */
  "preview_id": string;
  /** from SNAPSHOT_CREATE */
  "snapshot_id": string;
  /** least similarity of a tag to its canonical one; default 0.8999999761581421 */
  "threshold"?: number;
  /** most mappings; default 200 */
  "max_changes"?: number;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of TAG_NORMALIZE_APPLY. */
export interface TagNormalizeApplyReply {
  "applied_count": number;
  "preview_id": string;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of SNAPSHOT_CREATE: Saves every memory's tags. */
export interface SnapshotCreateArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** for people; default "" */
  "description"?: string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of SNAPSHOT_CREATE. */
export interface SnapshotCreateReply {
  "snapshot_id": string;
  "memory_count": number;
  "created_at": string;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of SNAPSHOT_RESTORE: Puts every memory's tags back as a snapshot saved them. */
export interface SnapshotRestoreArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** from SNAPSHOT_CREATE */
  "snapshot_id": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of SNAPSHOT_RESTORE. */
export interface SnapshotRestoreReply {
  "restored_count": number;
  "changed_count": number;
  "missing_count": number;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of CREATE_USER: Creates a user. */
export interface CreateUserArgs {
  /** the new user's id */
  "user_id": string;
  /** for people */
  "name"?: string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of CREATE_USER. */
export interface CreateUserReply {
  "success": boolean;
  "user": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of CREATE_AGENT: Creates an agent of a user. */
export interface CreateAgentArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the new agent's id */
  "agent_id": string;
  /** for people */
  "name"?: string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of CREATE_AGENT. */
export interface CreateAgentReply {
  "success": boolean;
  "agent": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of CREATE_SESSION: Creates a session of a user (optionally with one of its agents). */
export interface CreateSessionArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the new session's id */
  "session_id": string;
  /** for people */
  "name"?: string;
  /** the session's agent */
  "agent_id"?: string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of CREATE_SESSION. */
export interface CreateSessionReply {
  "success": boolean;
  "session": Record<string, unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of GET_USER: A user. */
export interface GetUserArgs {
  /** the user */
  "user_id": string;
}

/** The reply of GET_USER. */
export interface GetUserReply {
  "success": boolean;
  "user": Record<string, unknown>;
}

/** Arguments of GET_AGENT: An agent of a user. */
export interface GetAgentArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the agent */
  "agent_id": string;
}

/** The reply of GET_AGENT. */
export interface GetAgentReply {
  "success": boolean;
  "agent": Record<string, unknown>;
}

/** Arguments of GET_SESSION: A session of a user. */
export interface GetSessionArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the session */
  "session_id": string;
}

/** The reply of GET_SESSION. */
export interface GetSessionReply {
  "success": boolean;
  "session": Record<string, unknown>;
}

/** Arguments of LIST_USERS: Every user. */
export interface ListUsersArgs {
}

/** The reply of LIST_USERS. */
export interface ListUsersReply {
  "success": boolean;
  "count": number;
  "users": Array<unknown>;
}

/** Arguments of LIST_AGENTS: A user's agents. */
export interface ListAgentsArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
}

/** The reply of LIST_AGENTS. */
export interface ListAgentsReply {
  "success": boolean;
  "count": number;
  "agents": Array<unknown>;
}

/** Arguments of LIST_SESSIONS: A user's sessions. */
export interface ListSessionsArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
}

/** The reply of LIST_SESSIONS. */
export interface ListSessionsReply {
  "success": boolean;
  "count": number;
  "sessions": Array<unknown>;
}

/** Arguments of DELETE_USER: Deletes a user and everything of it, in one commit. */
export interface DeleteUserArgs {
  /** the user */
  "user_id": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of DELETE_USER. */
export interface DeleteUserReply {
  "kind": string;
  "id": string;
  "deleted_records": number;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of DELETE_AGENT: Deletes an agent, its sessions and their records, in one commit. */
export interface DeleteAgentArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the agent */
  "agent_id": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of DELETE_AGENT. */
export interface DeleteAgentReply {
  "kind": string;
  "id": string;
  "deleted_records": number;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of DELETE_SESSION: Deletes a session and its messages, in one commit. */
export interface DeleteSessionArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the session */
  "session_id": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of DELETE_SESSION. */
export interface DeleteSessionReply {
  "kind": string;
  "id": string;
  "deleted_records": number;
  "success": boolean;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of ADD_MESSAGES: Adds chat turns to a session (a turn the session holds is not stored again). */
export interface AddMessagesArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the session */
  "session_id": string;
  /** [{role, content, time?, id?}], at most 1,000; time: when the turn was said (RFC 3339 or a date), its valid_from; id: the caller's id for the turn (a LangChain or OpenAI message id) */
  "messages": Array<{ "role": "user" | "assistant" | "system" | "tool"; "content": string; "time"?: string; "id"?: string; }>;
  /** true (default): a turn the session holds is not stored again (its id is held, or the turns begin with the whole session and it is at a held position with the same role and content); false stores every turn; default true */
  "skip_held"?: boolean;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of ADD_MESSAGES. */
export interface AddMessagesReply {
  "success": boolean;
  "count": number;
  "memory_ids": Array<unknown>;
  "skipped": Array<unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of ADD_KNOWLEDGE: Adds user-level facts (through the hooks: a fact stored twice is one). */
export interface AddKnowledgeArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the facts, at most 1,000 */
  "items": Array<string>;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of ADD_KNOWLEDGE. */
export interface AddKnowledgeReply {
  "success": boolean;
  "count": number;
  "stored": number;
  "results": Array<unknown>;
  "partition": number;
  "seq": number;
}

/** Arguments of PUT_ITEM: Puts a JSON value under a key, found by the meaning of text; replaces the key's item. */
export interface PutItemArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the item's key: 1..=512 characters */
  "key": string;
  /** the value: a JSON object, at most 256 KiB */
  "value": Record<string, unknown>;
  /** what the item is found by: 1..=10,000 characters */
  "text": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of PUT_ITEM. */
export interface PutItemReply {
  "memory_id": number;
  "outcome": string;
  "content_preview": string;
  "category": string;
  "category_reason": string;
  "tags": Array<unknown>;
  "new_canonical_tags": Array<unknown>;
  "created_at": string;
  "valid_from": string;
  "supersedes": Array<unknown>;
  "dedup_candidates": number;
  "decisions": Array<unknown>;
  "success": boolean;
  "message": string;
  "reason"?: string;
  "replaced"?: number;
  "partition": number;
  "seq": number;
}

/** Arguments of GET_ITEM: The user's item of a key (found: false when there is none). Not an access. */
export interface GetItemArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the item's key: 1..=512 characters */
  "key": string;
}

/** The reply of GET_ITEM. */
export interface GetItemReply {
  "success": boolean;
  "found": boolean;
  "item": Record<string, unknown> | null;
}

/** Arguments of DELETE_ITEM: Deletes the user's item of a key (deleted: false when there was none). */
export interface DeleteItemArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** the item's key: 1..=512 characters */
  "key": string;
  /** a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice */
  "request_id"?: string;
}

/** The reply of DELETE_ITEM. */
export interface DeleteItemReply {
  "success": boolean;
  "deleted": boolean;
  "memory_id": number | null;
  "message": string;
  "partition": number;
  "seq": number;
}

/** Arguments of LIST_ITEMS: The user's items whose key starts with prefix, in key order. */
export interface ListItemsArgs {
  /** the user (tenant); default "default" */
  "user_id"?: string;
  /** a key prefix; every key when left out; default "" */
  "prefix"?: string;
  /** items to skip; default 0 */
  "offset"?: number;
  /** a page's most items; default 10 */
  "limit"?: number;
}

/** The reply of LIST_ITEMS. */
export interface ListItemsReply {
  "success": boolean;
  "count": number;
  "items": Array<unknown>;
}

/** Arguments of LIST_ITEM_USERS: Every user that holds items, with how many (a scoped connection: its own). */
export interface ListItemUsersArgs {
}

/** The reply of LIST_ITEM_USERS. */
export interface ListItemUsersReply {
  "success": boolean;
  "count": number;
  "users": Array<unknown>;
}

/** Every command: its arguments and its reply. */
export interface Commands {
  PING: [PingArgs, PingReply];
  HELP: [HelpArgs, HelpReply];
  AUTH: [AuthArgs, AuthReply];
  QUIT: [QuitArgs, QuitReply];
  STATS: [StatsArgs, StatsReply];
  PURGE: [PurgeArgs, PurgeReply];
  BACKUP: [BackupArgs, BackupReply];
  EXPORT: [ExportArgs, ExportReply];
  IMPORT: [ImportArgs, ImportReply];
  MAINTENANCE: [MaintenanceArgs, MaintenanceReply];
  REEMBED: [ReembedArgs, ReembedReply];
  STORE_MEMORY: [StoreMemoryArgs, StoreMemoryReply];
  LIST_RECENT_MEMORIES: [ListRecentMemoriesArgs, ListRecentMemoriesReply];
  GET_BY_MEMORY_ID: [GetByMemoryIdArgs, GetByMemoryIdReply];
  DELETE_BY_MEMORY_ID: [DeleteByMemoryIdArgs, DeleteByMemoryIdReply];
  UPDATE_MEMORY: [UpdateMemoryArgs, UpdateMemoryReply];
  FEEDBACK: [FeedbackArgs, FeedbackReply];
  LINEAGE: [LineageArgs, LineageReply];
  HISTORY: [HistoryArgs, HistoryReply];
  GET_MEMORY_STATS: [GetMemoryStatsArgs, GetMemoryStatsReply];
  CLEAR_OLD_MEMORIES: [ClearOldMemoriesArgs, ClearOldMemoriesReply];
  COMPACT_PREVIEW: [CompactPreviewArgs, CompactPreviewReply];
  COMPACT_APPLY: [CompactApplyArgs, CompactApplyReply];
  COMPACT_UNDO: [CompactUndoArgs, CompactUndoReply];
  MEND_PREVIEW: [MendPreviewArgs, MendPreviewReply];
  MEND_APPLY: [MendApplyArgs, MendApplyReply];
  MEND_UNDO: [MendUndoArgs, MendUndoReply];
  SEARCH_MEMORIES: [SearchMemoriesArgs, SearchMemoriesReply];
  QUERY: [QueryArgs, QueryReply];
  GET_UNIQUE_TAGS: [GetUniqueTagsArgs, GetUniqueTagsReply];
  GET_CANONICAL_TAGS: [GetCanonicalTagsArgs, GetCanonicalTagsReply];
  GET_TAG_FREQUENCIES: [GetTagFrequenciesArgs, GetTagFrequenciesReply];
  GET_TAG_WEIGHTS: [GetTagWeightsArgs, GetTagWeightsReply];
  TAG_NORMALIZE_PREVIEW: [TagNormalizePreviewArgs, TagNormalizePreviewReply];
  TAG_NORMALIZE_APPLY: [TagNormalizeApplyArgs, TagNormalizeApplyReply];
  SNAPSHOT_CREATE: [SnapshotCreateArgs, SnapshotCreateReply];
  SNAPSHOT_RESTORE: [SnapshotRestoreArgs, SnapshotRestoreReply];
  CREATE_USER: [CreateUserArgs, CreateUserReply];
  CREATE_AGENT: [CreateAgentArgs, CreateAgentReply];
  CREATE_SESSION: [CreateSessionArgs, CreateSessionReply];
  GET_USER: [GetUserArgs, GetUserReply];
  GET_AGENT: [GetAgentArgs, GetAgentReply];
  GET_SESSION: [GetSessionArgs, GetSessionReply];
  LIST_USERS: [ListUsersArgs, ListUsersReply];
  LIST_AGENTS: [ListAgentsArgs, ListAgentsReply];
  LIST_SESSIONS: [ListSessionsArgs, ListSessionsReply];
  DELETE_USER: [DeleteUserArgs, DeleteUserReply];
  DELETE_AGENT: [DeleteAgentArgs, DeleteAgentReply];
  DELETE_SESSION: [DeleteSessionArgs, DeleteSessionReply];
  ADD_MESSAGES: [AddMessagesArgs, AddMessagesReply];
  ADD_KNOWLEDGE: [AddKnowledgeArgs, AddKnowledgeReply];
  PUT_ITEM: [PutItemArgs, PutItemReply];
  GET_ITEM: [GetItemArgs, GetItemReply];
  DELETE_ITEM: [DeleteItemArgs, DeleteItemReply];
  LIST_ITEMS: [ListItemsArgs, ListItemsReply];
  LIST_ITEM_USERS: [ListItemUsersArgs, ListItemUsersReply];
}

/** A command's name. */
export type CommandName = keyof Commands;

/** What each command touches (`read` commands are safe to send again). */
export const COMMAND_CLASS: Record<CommandName, string> = {
  PING: "open",
  HELP: "open",
  AUTH: "connection",
  QUIT: "connection",
  STATS: "status",
  PURGE: "write",
  BACKUP: "write",
  EXPORT: "write",
  IMPORT: "write",
  MAINTENANCE: "write",
  REEMBED: "write",
  STORE_MEMORY: "write",
  LIST_RECENT_MEMORIES: "read",
  GET_BY_MEMORY_ID: "read",
  DELETE_BY_MEMORY_ID: "write",
  UPDATE_MEMORY: "write",
  FEEDBACK: "write",
  LINEAGE: "read",
  HISTORY: "read",
  GET_MEMORY_STATS: "read",
  CLEAR_OLD_MEMORIES: "write",
  COMPACT_PREVIEW: "read",
  COMPACT_APPLY: "write",
  COMPACT_UNDO: "write",
  MEND_PREVIEW: "read",
  MEND_APPLY: "write",
  MEND_UNDO: "write",
  SEARCH_MEMORIES: "read",
  QUERY: "read",
  GET_UNIQUE_TAGS: "read",
  GET_CANONICAL_TAGS: "read",
  GET_TAG_FREQUENCIES: "read",
  GET_TAG_WEIGHTS: "read",
  TAG_NORMALIZE_PREVIEW: "read",
  TAG_NORMALIZE_APPLY: "write",
  SNAPSHOT_CREATE: "write",
  SNAPSHOT_RESTORE: "write",
  CREATE_USER: "write",
  CREATE_AGENT: "write",
  CREATE_SESSION: "write",
  GET_USER: "read",
  GET_AGENT: "read",
  GET_SESSION: "read",
  LIST_USERS: "read",
  LIST_AGENTS: "read",
  LIST_SESSIONS: "read",
  DELETE_USER: "write",
  DELETE_AGENT: "write",
  DELETE_SESSION: "write",
  ADD_MESSAGES: "write",
  ADD_KNOWLEDGE: "write",
  PUT_ITEM: "write",
  GET_ITEM: "read",
  DELETE_ITEM: "write",
  LIST_ITEMS: "read",
  LIST_ITEM_USERS: "read",
};
