//! The resource routes as data: method, path and the command each runs. The router
//! (`routes.rs`) serves them and the OpenAPI document (`openapi.rs`) describes them.

/// One resource route: method, path (`{name}` parameters) and the command it runs.
pub struct Route {
    /// The HTTP method.
    pub method: &'static str,
    /// The path, axum's syntax.
    pub path: &'static str,
    /// The command's protocol name.
    pub command: &'static str,
}

const fn route(method: &'static str, path: &'static str, command: &'static str) -> Route {
    Route {
        method,
        path,
        command,
    }
}

/// The resource routes, in the OpenAPI document's order.
pub static ROUTES: &[Route] = &[
    route("POST", "/v1/memories", "STORE_MEMORY"),
    route("GET", "/v1/memories", "LIST_RECENT_MEMORIES"),
    route("GET", "/v1/memories/{memory_id}", "GET_BY_MEMORY_ID"),
    route("PATCH", "/v1/memories/{memory_id}", "UPDATE_MEMORY"),
    route("DELETE", "/v1/memories/{memory_id}", "DELETE_BY_MEMORY_ID"),
    route("GET", "/v1/memories/{memory_id}/history", "HISTORY"),
    route("GET", "/v1/memories/{memory_id}/lineage", "LINEAGE"),
    route("POST", "/v1/memories/{memory_id}/feedback", "FEEDBACK"),
    route("POST", "/v1/search", "SEARCH_MEMORIES"),
    route("POST", "/v1/query", "QUERY"),
    route("GET", "/v1/stats", "STATS"),
    route("GET", "/v1/memory-stats", "GET_MEMORY_STATS"),
    route("GET", "/v1/users", "LIST_USERS"),
    route("POST", "/v1/users", "CREATE_USER"),
    route("GET", "/v1/users/{user_id}", "GET_USER"),
    route("DELETE", "/v1/users/{user_id}", "DELETE_USER"),
    route("GET", "/v1/users/{user_id}/agents", "LIST_AGENTS"),
    route("POST", "/v1/users/{user_id}/agents", "CREATE_AGENT"),
    route("GET", "/v1/users/{user_id}/agents/{agent_id}", "GET_AGENT"),
    route(
        "DELETE",
        "/v1/users/{user_id}/agents/{agent_id}",
        "DELETE_AGENT",
    ),
    route("GET", "/v1/users/{user_id}/sessions", "LIST_SESSIONS"),
    route("POST", "/v1/users/{user_id}/sessions", "CREATE_SESSION"),
    route(
        "GET",
        "/v1/users/{user_id}/sessions/{session_id}",
        "GET_SESSION",
    ),
    route(
        "DELETE",
        "/v1/users/{user_id}/sessions/{session_id}",
        "DELETE_SESSION",
    ),
    route(
        "POST",
        "/v1/users/{user_id}/sessions/{session_id}/messages",
        "ADD_MESSAGES",
    ),
    route("GET", "/v1/users/{user_id}/items", "LIST_ITEMS"),
    route("GET", "/v1/users/{user_id}/items/{key}", "GET_ITEM"),
    route("PUT", "/v1/users/{user_id}/items/{key}", "PUT_ITEM"),
    route("DELETE", "/v1/users/{user_id}/items/{key}", "DELETE_ITEM"),
];

/// The route every command is reachable under.
pub const COMMAND_ROUTE: &str = "/v1/commands/{command}";
