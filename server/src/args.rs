//! Request arguments, shared by every transport.
//!
//! A request's arguments are one JSON object. [`Args::checked`] refuses unknown names and
//! wrong types before the command runs, so a typo never silently drops a filter and an error
//! reply never follows an effect; then [`Args`] takes them out by name and type. Every failure
//! is a [`Fail`] (`crate::fail`).

pub use crate::fail::{Code, Fail, Outcome};
use amberdb::{EngineError, MemoryId, Timestamp};
use serde_json::{Map, Value, json};

/// The JSON type an argument takes (for HELP and MCP's input schemas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// A string.
    Str,
    /// A non-negative integer.
    Int,
    /// A number.
    Num,
    /// `true` / `false`.
    Bool,
    /// A list of strings.
    StrList,
    /// A list of `{role, content}` objects.
    Messages,
    /// A JSON object (an item's value).
    Object,
}

impl Ty {
    /// JSON Schema of the type.
    #[must_use]
    pub fn schema(self) -> Value {
        match self {
            Ty::Str => json!({"type": "string"}),
            Ty::Int => json!({"type": "integer", "minimum": 0}),
            Ty::Num => json!({"type": "number"}),
            Ty::Bool => json!({"type": "boolean"}),
            Ty::StrList => json!({"type": "array", "items": {"type": "string"}}),
            Ty::Messages => json!({"type": "array", "items": {
                "type": "object",
                "properties": {"role": {"type": "string", "enum": ["user", "assistant", "system", "tool"]},
                               "content": {"type": "string"},
                               "time": {"type": "string", "description": "when it was said (RFC 3339 or a date)"},
                               "id": {"type": "string", "description": "the caller's id for the turn (a message id): a turn sent again with it is not stored again"}},
                "required": ["role", "content"]}}),
            Ty::Object => json!({"type": "object"}),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Ty::Str => "a string",
            Ty::Int => "a non-negative integer",
            Ty::Num => "a number",
            Ty::Bool => "true or false",
            Ty::StrList => "a list of strings",
            Ty::Messages => "a list of {role, content, time?, id?}",
            Ty::Object => "a JSON object",
        }
    }
}

/// Most items in one request's list (messages, knowledge items, tags to filter by).
pub const MAX_LIST_ITEMS: usize = 1_000;

/// One argument of a command.
#[derive(Debug)]
pub struct Arg {
    /// Its name in the JSON object.
    pub name: &'static str,
    /// Its type.
    pub ty: Ty,
    /// Whether it must be given.
    pub required: bool,
    /// For an integer: the least and the most it may be (the parser refuses others before
    /// the command runs; HELP and the MCP schema show them).
    pub range: Option<(u64, u64)>,
    /// What it does.
    pub help: &'static str,
    /// What an optional argument is when a request leaves it out (HELP and the MCP schema
    /// show it; the command's typed arguments get it): `None` when leaving it out means
    /// something of its own ("no filter", "the caller's user").
    pub default: Option<Fallback>,
}

/// The value an optional argument takes when a request leaves it out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fallback {
    /// An integer.
    Int(u64),
    /// A number.
    Num(f32),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(&'static str),
}

impl Fallback {
    /// As JSON, for HELP and the MCP schema.
    #[must_use]
    pub fn to_json(self) -> Value {
        match self {
            Fallback::Int(n) => json!(n),
            Fallback::Num(f) => json!(f),
            Fallback::Bool(b) => json!(b),
            Fallback::Str(s) => json!(s),
        }
    }
}

impl Arg {
    /// With a range: `min..=max`.
    pub const fn within(self, min: u64, max: u64) -> Arg {
        Arg {
            range: Some((min, max)),
            ..self
        }
    }

    /// With the value it takes when left out.
    pub const fn or(self, default: Fallback) -> Arg {
        Arg {
            default: Some(default),
            ..self
        }
    }
}

/// A required argument.
pub const fn req(name: &'static str, ty: Ty, help: &'static str) -> Arg {
    Arg {
        name,
        ty,
        required: true,
        range: None,
        help,
        default: None,
    }
}

/// An optional argument.
pub const fn opt(name: &'static str, ty: Ty, help: &'static str) -> Arg {
    Arg {
        name,
        ty,
        required: false,
        range: None,
        help,
        default: None,
    }
}

/// A request's arguments, taken out one by one.
#[derive(Debug, Default)]
pub struct Args {
    map: Map<String, Value>,
}

impl Args {
    /// The arguments of a request (an empty object when it had none).
    #[must_use]
    pub fn new(map: Map<String, Value>) -> Args {
        Args { map }
    }

    /// Whether an argument is present (and not null).
    #[must_use]
    pub fn has(&self, name: &str) -> bool {
        self.map.get(name).is_some_and(|v| !v.is_null())
    }

    /// Takes a value; `null` counts as absent (JSON clients send `null` for "not given").
    fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name).filter(|v| !v.is_null())
    }

    fn wrong(name: &str, ty: Ty, got: &Value) -> Fail {
        let what = match got {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "a list",
            Value::Object(_) => "an object",
        };
        Fail::invalid(name, format!("must be {}, got {what}", ty.name()))
    }

    /// An optional string.
    ///
    /// # Errors
    /// `invalid` if it is not a string.
    pub fn opt_str(&mut self, name: &str) -> Result<Option<String>, Fail> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(Args::wrong(name, Ty::Str, &v)),
        }
    }

    /// A required string.
    ///
    /// # Errors
    /// `invalid` if missing or not a string.
    pub fn str(&mut self, name: &str) -> Result<String, Fail> {
        self.opt_str(name)?
            .ok_or_else(|| Fail::invalid(name, "is required"))
    }

    /// An optional non-negative integer (a float with no fraction counts: `10.0`).
    ///
    /// # Errors
    /// `invalid` if it is not one.
    pub fn opt_u64(&mut self, name: &str) -> Result<Option<u64>, Fail> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
                        .map(|f| f as u64)
                })
                .map(Some)
                .ok_or_else(|| Fail::invalid(name, format!("must be {}, got {n}", Ty::Int.name()))),
            Some(v) => Err(Args::wrong(name, Ty::Int, &v)),
        }
    }

    /// An optional count whose range the command's table states (`Arg::within`), checked by
    /// [`Args::checked`] before the handler reads it.
    ///
    /// # Errors
    /// `invalid` if it is not a non-negative integer.
    pub fn opt_usize(&mut self, name: &str) -> Result<Option<usize>, Fail> {
        Ok(self
            .opt_u64(name)?
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
    }

    /// An optional number.
    ///
    /// # Errors
    /// `invalid` if it is not a finite number.
    pub fn opt_f32(&mut self, name: &str) -> Result<Option<f32>, Fail> {
        match self.take(name) {
            None => Ok(None),
            #[expect(
                clippy::cast_possible_truncation,
                reason = "scores and distances are f32"
            )]
            Some(Value::Number(n)) => match n.as_f64().map(|f| f as f32) {
                Some(f) if f.is_finite() => Ok(Some(f)),
                _ => Err(Fail::invalid(name, format!("{n} is out of range"))),
            },
            Some(v) => Err(Args::wrong(name, Ty::Num, &v)),
        }
    }

    /// An optional boolean.
    ///
    /// # Errors
    /// `invalid` if it is not a boolean.
    pub fn opt_bool(&mut self, name: &str) -> Result<Option<bool>, Fail> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(v) => Err(Args::wrong(name, Ty::Bool, &v)),
        }
    }

    /// An optional list (at most [`MAX_LIST_ITEMS`]) whose every item `item` accepts (it hands
    /// back what it refuses, for the error).
    fn opt_list<T>(
        &mut self,
        name: &str,
        ty: Ty,
        item: impl Fn(Value) -> Result<T, Value>,
    ) -> Result<Option<Vec<T>>, Fail> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Array(items)) => {
                if items.len() > MAX_LIST_ITEMS {
                    return Err(too_many(name, items.len()));
                }
                items
                    .into_iter()
                    .map(|v| item(v).map_err(|v| Args::wrong(name, ty, &v)))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
            Some(v) => Err(Args::wrong(name, ty, &v)),
        }
    }

    /// An optional list of strings (at most [`MAX_LIST_ITEMS`]).
    ///
    /// # Errors
    /// `invalid` if it is not a list of strings; `limit_exceeded` if it is too long.
    pub fn opt_strs(&mut self, name: &str) -> Result<Option<Vec<String>>, Fail> {
        self.opt_list(name, Ty::StrList, |v| match v {
            Value::String(s) => Ok(s),
            other => Err(other),
        })
    }

    /// An optional list of objects (at most [`MAX_LIST_ITEMS`]).
    ///
    /// # Errors
    /// `invalid` if it is not a list of objects; `limit_exceeded` if it is too long.
    pub fn opt_objects(&mut self, name: &str) -> Result<Option<Vec<Map<String, Value>>>, Fail> {
        self.opt_list(name, Ty::Messages, |v| match v {
            Value::Object(o) => Ok(o),
            other => Err(other),
        })
    }

    /// An optional JSON object.
    ///
    /// # Errors
    /// `invalid` if it is not an object.
    pub fn opt_object(&mut self, name: &str) -> Result<Option<Map<String, Value>>, Fail> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(v) => Err(Args::wrong(name, Ty::Object, &v)),
        }
    }

    /// An optional time: RFC 3339 text or a plain date.
    ///
    /// # Errors
    /// `invalid` if it does not parse.
    pub fn opt_time(&mut self, name: &str) -> Result<Option<Timestamp>, Fail> {
        match self.opt_str(name)? {
            None => Ok(None),
            Some(s) => Timestamp::parse_rfc3339(&s).map(Some).ok_or_else(|| {
                Fail::invalid(
                    name,
                    format!("{s:?} is not an RFC 3339 time like 2026-11-22T09:30:00Z or a date like 2026-11-22"),
                )
            }),
        }
    }

    /// A request's arguments, checked against a command's argument list before anything runs:
    /// a name the list does not have, or a value not of its declared type (read by the same
    /// parsers the typed arguments use), and an integer outside its range, is an error here, so a
    /// handler never starts on a request it would refuse halfway. Enumerations and times are
    /// read by the command's typed arguments ([`Arguments::parse`]) before the handler runs;
    /// the handler checks the rest before its one library call.
    ///
    /// # Errors
    /// `invalid` naming the unknown arguments, or the first mistyped one; `limit_exceeded`
    /// for an over-long list.
    pub fn checked(map: Map<String, Value>, declared: &[Arg]) -> Result<Args, Fail> {
        let unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !declared.iter().any(|a| a.name == *k))
            .collect();
        if !unknown.is_empty() {
            let mut f = Fail::new(
                Code::Invalid,
                format!("unknown argument(s) {unknown:?}: HELP <command> lists its arguments"),
            );
            f.body.insert("field".into(), json!(unknown));
            return Err(f);
        }
        for arg in declared {
            let Some(value) = map.get(arg.name).filter(|v| !v.is_null()) else {
                if arg.required {
                    return Err(Fail::invalid(arg.name, "is required"));
                }
                continue;
            };
            let mut one = Args::new(Map::from_iter([(arg.name.to_owned(), value.clone())]));
            match arg.ty {
                Ty::Str => one.opt_str(arg.name).map(drop),
                Ty::Int => match (one.opt_u64(arg.name)?, arg.range) {
                    (Some(n), Some((_, max))) if n > max => {
                        Err(Fail::from(EngineError::LimitExceeded {
                            what: arg.name,
                            limit: usize::try_from(max).unwrap_or(usize::MAX),
                            got: usize::try_from(n).unwrap_or(usize::MAX),
                        }))
                    }
                    (Some(n), Some((min, _))) if n < min => Err(Fail::invalid(
                        arg.name,
                        format!("{n} is below the minimum of {min}"),
                    )),
                    _ => Ok(()),
                },
                Ty::Num => one.opt_f32(arg.name).map(drop),
                Ty::Bool => one.opt_bool(arg.name).map(drop),
                Ty::StrList => one.opt_strs(arg.name).map(drop),
                Ty::Messages => one.opt_objects(arg.name).map(drop),
                Ty::Object => one.opt_object(arg.name).map(drop),
            }?;
        }
        Ok(Args { map })
    }
}

/// A command's arguments as one typed struct, made by `arguments!`: `ARGS` is what HELP,
/// the MCP schema and [`Args::checked`] read; `parse` reads exactly those, each by its
/// field's type ([`FromArg`]), with the defaults and ranges `ARGS` states.
pub trait Arguments: Sized {
    /// The arguments, in the order HELP lists them.
    const ARGS: &'static [Arg];
    /// Reads a checked request's arguments.
    ///
    /// # Errors
    /// `invalid` for a missing required argument or a mistyped one (which [`Args::checked`]
    /// has refused before, so only a table that drifted from its struct gets here).
    fn parse(args: &mut Args) -> Result<Self, Fail>;
}

/// One typed argument read from a request by its spec (name, default).
pub trait FromArg: Sized {
    /// Reads the argument `arg` describes.
    ///
    /// # Errors
    /// `invalid` when it is missing with no default, or of the wrong type.
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail>;
}

fn missing(arg: &Arg) -> Fail {
    Fail::invalid(arg.name, "is required")
}

/// A scalar argument: optional as an `Option`, or plain with the spec's default (a required
/// one when the spec has none).
macro_rules! scalar {
    ($ty:ty, $read:ident, $fallback:ident) => {
        impl FromArg for Option<$ty> {
            fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
                args.$read(arg.name)
            }
        }

        impl FromArg for $ty {
            fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
                match (args.$read(arg.name)?, arg.default) {
                    (Some(v), _) => Ok(v),
                    (None, Some(Fallback::$fallback(d))) => Ok(d.into()),
                    (None, _) => Err(missing(arg)),
                }
            }
        }
    };
}
scalar!(String, opt_str, Str);
scalar!(u64, opt_u64, Int);
scalar!(f32, opt_f32, Num);
scalar!(bool, opt_bool, Bool);

impl FromArg for Option<usize> {
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        args.opt_usize(arg.name)
    }
}

impl FromArg for usize {
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        u64::from_arg(args, arg).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }
}

impl FromArg for Option<Vec<String>> {
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        args.opt_strs(arg.name)
    }
}

impl FromArg for Vec<String> {
    /// Left out, an empty list.
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        match args.opt_strs(arg.name)? {
            Some(v) => Ok(v),
            None if arg.required => Err(missing(arg)),
            None => Ok(Vec::new()),
        }
    }
}

impl FromArg for Vec<Map<String, Value>> {
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        args.opt_objects(arg.name)?.ok_or_else(|| missing(arg))
    }
}

impl FromArg for Map<String, Value> {
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        args.opt_object(arg.name)?.ok_or_else(|| missing(arg))
    }
}

impl FromArg for Option<Timestamp> {
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        args.opt_time(arg.name)
    }
}

impl FromArg for MemoryId {
    /// An integer ≥ 1 (vector-memory-mcp's ids).
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        match args.opt_u64(arg.name)? {
            Some(id) if id >= 1 => Ok(MemoryId(id)),
            Some(_) => Err(Fail::invalid(arg.name, "must be a positive integer")),
            None => Err(missing(arg)),
        }
    }
}

/// A command's typed arguments: the struct, and its [`Arguments`] (the spec list, and the
/// parse that reads each field by its spec). One declaration per command, so the table, HELP,
/// the MCP schema, ranges, defaults and what the handler reads cannot drift apart.
///
/// ```text
/// arguments! {
///     /// LIST_ITEMS.
///     pub(super) struct ListItems {
///         user: Option<String> = USER,
///         limit: usize = opt("limit", Ty::Int, "a page").within(1, PAGE).or(Fallback::Int(10)),
///     }
/// }
/// ```
macro_rules! arguments {
    ($(#[$m:meta])* $vis:vis struct $name:ident {
        $($(#[$fm:meta])* $field:ident : $ty:ty = $arg:expr),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Debug)]
        $vis struct $name {
            $($(#[$fm])* pub(crate) $field: $ty,)*
        }

        impl $crate::args::Arguments for $name {
            const ARGS: &'static [$crate::args::Arg] = &[$($arg),*];

            #[allow(unused_variables, unused_mut, unused_assignments)]
            fn parse(args: &mut $crate::args::Args) -> Result<Self, $crate::args::Fail> {
                let mut specs = Self::ARGS.iter();
                Ok($name {
                    $($field: <$ty as $crate::args::FromArg>::from_arg(
                        args,
                        specs.next().expect("one spec per field"),
                    )?,)*
                })
            }
        }
    };
}

pub(crate) use arguments;

/// A library parse's refusal as `invalid` naming the request's field.
pub(crate) fn parsed<T, E: Into<EngineError>>(field: &str, r: Result<T, E>) -> Result<T, Fail> {
    r.map_err(|e| match e.into() {
        EngineError::Invalid { reason, .. } => Fail::invalid(field, reason),
        other => Fail::from(other),
    })
}

/// An optional text argument read as one of the library's named values.
macro_rules! named_value {
    ($ty:ty, $parse:expr) => {
        impl FromArg for Option<$ty> {
            fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
                args.opt_str(arg.name)?
                    .map(|s| parsed(arg.name, $parse(&s)))
                    .transpose()
            }
        }
    };
}
named_value!(amberdb::Kind, amberdb::Kind::parse);
named_value!(amberdb::Role, amberdb::Role::parse);
named_value!(amberdb::Merge, amberdb::Merge::parse);
named_value!(amberdb::Mode, amberdb::Mode::parse);
named_value!(amberdb::Strategy, amberdb::Strategy::parse);
named_value!(amberdb::Fold, amberdb::Fold::parse);
named_value!(amberdb::Group, amberdb::Group::parse);
named_value!(amberdb::Shelf, amberdb::Shelf::parse);
named_value!(amberdb::query::StoreType, amberdb::query::StoreType::parse);
named_value!(amberdb::Category, |s: &str| amberdb::Category::parse(
    s.trim()
));

impl FromArg for Vec<amberdb::WriteHook> {
    /// Write hooks by name; left out, none.
    fn from_arg(args: &mut Args, arg: &Arg) -> Result<Self, Fail> {
        let names = Vec::<String>::from_arg(args, arg)?;
        names
            .iter()
            .map(|name| match name.as_str() {
                "tags" => Ok(amberdb::WriteHook::Tags),
                "category" => Ok(amberdb::WriteHook::Category),
                "exact_dedup" => Ok(amberdb::WriteHook::ExactDedup),
                "semantic_dedup" => Ok(amberdb::WriteHook::SemanticDedup),
                other => Err(Fail::invalid(
                    arg.name,
                    format!("{other:?} is not one of tags, category, exact_dedup, semantic_dedup"),
                )),
            })
            .collect()
    }
}

fn too_many(name: &str, n: usize) -> Fail {
    let mut f = Fail::new(
        Code::LimitExceeded,
        format!(
            "{name}: {n} items, at most {MAX_LIST_ITEMS} per request; send the rest in another request"
        ),
    );
    f.body.insert("field".into(), json!(name));
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Args {
        match v {
            Value::Object(m) => Args::new(m),
            _ => Args::default(),
        }
    }

    #[test]
    fn types_are_checked_and_unknown_fields_named() {
        let mut a = args(json!({"limit": 5, "query": "x", "tags": ["a"], "filter": 1, "n": null}));
        assert_eq!(a.opt_usize("limit").unwrap(), Some(5));
        assert_eq!(a.str("query").unwrap(), "x");
        assert_eq!(a.opt_strs("tags").unwrap(), Some(vec!["a".to_owned()]));
        assert_eq!(a.opt_u64("n").unwrap(), None, "null is absent");

        let mut a = args(json!({"limit": "5", "memory_id": 0, "k": 2.5, "t": "monday"}));
        assert_eq!(a.opt_u64("limit").unwrap_err().body["field"], "limit");
        assert_eq!(
            MemoryId::from_arg(&mut a, &req("memory_id", Ty::Int, ""))
                .unwrap_err()
                .code,
            Code::Invalid
        );
        assert!(a.opt_u64("k").is_err());
        assert!(a.opt_time("t").is_err());
        let huge = args(json!({"threshold": 1e300}))
            .opt_f32("threshold")
            .unwrap_err();
        assert_eq!(huge.body["field"], "threshold", "never read as absent");
        let many: Vec<String> = (0..=MAX_LIST_ITEMS).map(|i| i.to_string()).collect();
        assert_eq!(
            args(json!({"tags": many}))
                .opt_strs("tags")
                .unwrap_err()
                .code,
            Code::LimitExceeded
        );
    }

    #[test]
    fn the_table_decides_required_ranges_and_what_a_handler_may_read() {
        use crate::commands::find;
        let search = find("SEARCH").unwrap();
        let missing = Args::checked(Map::new(), search.args).unwrap_err();
        assert_eq!(
            (missing.code, &missing.body["field"]),
            (Code::Invalid, &json!("query"))
        );
        let with = |extra: Value| {
            let mut m = json!({"query": "q"}).as_object().unwrap().clone();
            m.extend(extra.as_object().unwrap().clone());
            Args::checked(m, search.args)
        };
        let over = with(json!({"limit": 51})).unwrap_err();
        assert_eq!(
            (over.code, &over.body["field"]),
            (Code::LimitExceeded, &json!("limit"))
        );
        let under = with(json!({"limit": 0})).unwrap_err();
        assert_eq!(
            (under.code, &under.body["field"]),
            (Code::Invalid, &json!("limit"))
        );
        assert!(with(json!({"limit": 50, "offset": 10_000})).is_ok());
        // HELP and the MCP schema show the same range.
        let schema = search.input_schema();
        assert_eq!(schema["properties"]["limit"]["maximum"], 50);
        let help = search.help();
        let limit = help["arguments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == "limit")
            .unwrap();
        assert_eq!(limit["range"], json!([1, 50]));
    }

    arguments! {
        /// A command's arguments, for the test.
        struct Page {
            query: String = req("query", Ty::Str, "what to find"),
            limit: usize = opt("limit", Ty::Int, "a page").within(1, 50).or(Fallback::Int(10)),
            exact: bool = opt("exact", Ty::Bool, "only the same words").or(Fallback::Bool(false)),
            kind: Option<amberdb::Kind> = opt("kind", Ty::Str, "a kind"),
            tags: Vec<String> = opt("tags", Ty::StrList, "tags"),
        }
    }

    #[test]
    fn one_declaration_gives_the_parse_its_defaults_and_help_and_schema_show_them() {
        let parse = |v: Value| {
            let Value::Object(m) = v else { unreachable!() };
            Args::checked(m, Page::ARGS).and_then(|mut a| Page::parse(&mut a))
        };
        let page = parse(json!({"query": "q"})).unwrap();
        assert_eq!(
            (page.query.as_str(), page.limit, page.exact, page.kind),
            ("q", 10, false, None)
        );
        assert!(page.tags.is_empty());
        let page = parse(
            json!({"query": "q", "limit": 3, "exact": true, "kind": "message", "tags": ["a"]}),
        )
        .unwrap();
        assert_eq!(
            (page.limit, page.exact, page.kind),
            (3, true, Some(amberdb::Kind::Message))
        );
        assert_eq!(page.tags, vec!["a".to_owned()]);
        let missing = parse(json!({"limit": 3})).unwrap_err();
        assert_eq!(
            (missing.code, &missing.body["field"]),
            (Code::Invalid, &json!("query"))
        );
        let unknown_kind = parse(json!({"query": "q", "kind": "gossip"})).unwrap_err();
        assert_eq!(
            (unknown_kind.code, &unknown_kind.body["field"]),
            (Code::Invalid, &json!("kind"))
        );
        assert_eq!(
            parse(json!({"query": "q", "limit": 51})).unwrap_err().code,
            Code::LimitExceeded
        );

        let command = crate::commands::Command {
            name: "PAGE",
            alias: None,
            tool: true,
            class: crate::commands::Class::Read,
            summary: "a test command",
            args: Page::ARGS,
            reply: &[],
            run: None,
        };
        let schema = command.input_schema();
        assert_eq!(schema["properties"]["limit"]["default"], 10);
        assert_eq!(
            schema["properties"]["limit"]["description"],
            "a page; default 10"
        );
        assert_eq!(schema["properties"]["exact"]["default"], false);
        assert!(schema["properties"]["kind"].get("default").is_none());
        assert_eq!(schema["required"], json!(["query"]));
        let help = command.help();
        let limit = help["arguments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == "limit")
            .unwrap();
        assert_eq!(
            (&limit["default"], &limit["range"]),
            (&json!(10), &json!([1, 50]))
        );
    }
}
