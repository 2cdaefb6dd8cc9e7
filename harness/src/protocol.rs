//! GradBench's protocol (its `CONTRIBUTING.md`, §Protocol): JSON lines on a tool's stdin and
//! stdout, one response per message, ids counting from 0. The eval sends `start`, `define` a
//! module, `evaluate` functions of it, and `analysis` (its verdict on a response); the tool
//! answers each with the same id (`evaluate`: `success`, `output`, `timings` of its runs,
//! `error`). adgauge speaks both sides: it drives tools (`external.rs`) and serves its own
//! engine as a tool (`serve.rs`).

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// A message from the eval to the tool.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    Start {
        id: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eval: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        config: Option<Json>,
    },
    Define {
        id: i64,
        module: String,
    },
    Evaluate {
        id: i64,
        module: String,
        function: String,
        /// The function's input, with GradBench's `min_runs` and `min_seconds` in it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Json>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    Analysis {
        id: i64,
        of: i64,
        valid: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl Message {
    pub fn id(&self) -> i64 {
        match self {
            Message::Start { id, .. }
            | Message::Define { id, .. }
            | Message::Evaluate { id, .. }
            | Message::Analysis { id, .. } => *id,
        }
    }
}

/// One timed run of a tool.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct Timing {
    pub name: String,
    pub nanoseconds: u64,
}

/// Any response (the fields that a kind does not use are absent).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Response {
    pub id: i64,
    /// `start`: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Json>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Json>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Vec<Timing>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An `evaluate` message as its protocol line (newline included), written from borrowed parts:
/// the input's fields with `min_runs` = `runs` and `min_seconds` = 0 added, so that a large
/// input is serialized once and never copied.
pub fn evaluate_line(id: i64, module: &str, function: &str, input: &Json, runs: u64) -> serde_json::Result<Vec<u8>> {
    use serde::ser::SerializeMap;

    /// The input with the run settings added (an input that is not an object goes as it is).
    struct WithRuns<'a> {
        input: &'a Json,
        runs: u64,
    }
    impl Serialize for WithRuns<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let Json::Object(fields) = self.input else { return self.input.serialize(s) };
            let mut map = s.serialize_map(None)?;
            for (key, value) in fields.iter().filter(|(k, _)| !matches!(k.as_str(), "min_runs" | "min_seconds")) {
                map.serialize_entry(key, value)?;
            }
            map.serialize_entry("min_runs", &self.runs)?;
            map.serialize_entry("min_seconds", &0)?;
            map.end()
        }
    }
    #[derive(Serialize)]
    struct Line<'a> {
        id: i64,
        kind: &'static str,
        module: &'a str,
        function: &'a str,
        input: WithRuns<'a>,
    }
    let mut out =
        serde_json::to_vec(&Line { id, kind: "evaluate", module, function, input: WithRuns { input, runs } })?;
    out.push(b'\n');
    Ok(out)
}

/// The protocol's run-count fields, removed from an `evaluate` input before the function sees
/// it: (min_runs, min_seconds).
pub fn take_run_settings(input: &mut Json) -> (u64, f64) {
    let Json::Object(map) = input else { return (1, 0.0) };
    let runs = map.remove("min_runs").and_then(|v| v.as_u64()).unwrap_or(1).max(1);
    let seconds = map.remove("min_seconds").and_then(|v| v.as_f64()).filter(|s| s.is_finite()).unwrap_or(0.0);
    // A day at most: longer is a typo, and `Duration` cannot hold every f64.
    (runs.min(1_000_000), seconds.clamp(0.0, 86_400.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_and_write_gradbench_lines() {
        let line = r#"{"id": 2, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": {"x": [1], "n": 4, "min_runs": 3, "min_seconds": 0.5}}"#;
        let m: Message = serde_json::from_str(line).unwrap();
        let Message::Evaluate { id, module, function, input: Some(mut input), .. } = m.clone() else { panic!("{m:?}") };
        assert_eq!((id, module.as_str(), function.as_str()), (2, "llsq", "gradient"));
        assert_eq!(take_run_settings(&mut input), (3, 0.5));
        assert_eq!(input, serde_json::json!({"x": [1], "n": 4}));
        let back: Message = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        let start = serde_json::to_value(Message::Start { id: 0, eval: Some("hist".into()), config: None }).unwrap();
        assert_eq!(start, serde_json::json!({"id": 0, "kind": "start", "eval": "hist"}));
        let r: Response = serde_json::from_str(
            r#"{"id": 2, "success": true, "output": [1.5], "timings": [{"name": "evaluate", "nanoseconds": 1200}]}"#,
        )
        .unwrap();
        assert_eq!(r.timings.unwrap()[0].nanoseconds, 1200);
        assert!(serde_json::from_str::<Message>(r#"{"id": 1, "kind": "nope"}"#).is_err());
    }

    #[test]
    fn an_evaluate_line_is_the_message_with_its_run_settings() {
        let input = serde_json::json!({"x": [1.5, 2], "n": 4, "min_runs": 9});
        let line = evaluate_line(7, "llsq", "gradient", &input, 3).unwrap();
        assert_eq!(line.last(), Some(&b'\n'));
        let m: Message = serde_json::from_slice(&line).unwrap();
        let want = serde_json::json!({"x": [1.5, 2], "n": 4, "min_runs": 3, "min_seconds": 0});
        assert_eq!(
            m,
            Message::Evaluate {
                id: 7,
                module: "llsq".into(),
                function: "gradient".into(),
                input: Some(want),
                description: None
            }
        );
        let bare = evaluate_line(1, "m", "f", &Json::Null, 1).unwrap();
        assert_eq!(serde_json::from_slice::<Json>(&bare).unwrap()["input"], Json::Null);
    }
}
