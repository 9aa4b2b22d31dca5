//! JSON-RPC 2.0 framing for ACP on stdio (one object per line): encoding herd's requests,
//! notifications and answers, and sorting an agent's line into response, request or notification.

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// One message from the agent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// The answer to one of herd's requests.
    Response { id: Value, outcome: Result<Value, RpcError> },
    /// The agent asks herd (`session/request_permission`, `fs/…`, `terminal/…`).
    Request { id: Value, method: String, params: Value },
    /// The agent tells herd (`session/update`).
    Notification { method: String, params: Value },
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RpcError {
    #[serde(default)]
    pub code: i64,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub data: Option<Value>,
}

impl RpcError {
    /// `message` plus `data` when there is any (agents put the API error there).
    pub fn describe(&self) -> String {
        match &self.data {
            Some(Value::String(d)) => format!("{} ({d})", self.message),
            Some(d) if !d.is_null() => format!("{} ({d})", self.message),
            _ => self.message.clone(),
        }
    }
}

/// Sorts a parsed line; `None` for JSON that is no JSON-RPC message.
pub(crate) fn classify(v: Value) -> Option<Incoming> {
    let Value::Object(mut m) = v else { return None };
    let method = m.get("method").and_then(Value::as_str).map(str::to_owned);
    let id = m.remove("id");
    match (method, id) {
        (Some(method), Some(id)) if !id.is_null() => {
            Some(Incoming::Request { id, method, params: take(&mut m, "params") })
        }
        (Some(method), _) => {
            Some(Incoming::Notification { method, params: take(&mut m, "params") })
        }
        (None, Some(id)) => {
            let outcome = match (m.remove("result"), m.remove("error")) {
                (_, Some(e)) if !e.is_null() => Err(serde_json::from_value(e.clone())
                    .unwrap_or(RpcError { code: 0, message: e.to_string(), data: None })),
                (Some(r), _) => Ok(r),
                (None, _) => return None,
            };
            Some(Incoming::Response { id, outcome })
        }
        (None, None) => None,
    }
}

fn take(m: &mut Map<String, Value>, k: &str) -> Value {
    m.remove(k).unwrap_or(Value::Null)
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// A request line.
pub(crate) fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// A notification line.
pub(crate) fn notification(method: &str, params: Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// The result line for the agent's request `id`.
pub(crate) fn result(id: &Value, result: Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// The error line for the agent's request `id`.
pub(crate) fn error(id: &Value, code: i64, message: &str) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

/// A request id as herd keeps it: compact JSON, so `0` and `"0"` stay apart.
pub(crate) fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The id back from its key (a key that is not JSON is taken as a string id).
pub(crate) fn id_value(key: &str) -> Value {
    serde_json::from_str(key).unwrap_or_else(|_| Value::String(key.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_messages() {
        let r = classify(json!({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s"}}));
        assert_eq!(
            r,
            Some(Incoming::Response { id: json!(2), outcome: Ok(json!({"sessionId": "s"})) })
        );
        let e = classify(
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "Internal error", "data": "boom"}}),
        );
        let Some(Incoming::Response { outcome: Err(err), .. }) = e else { panic!() };
        assert_eq!((err.code, err.describe().as_str()), (-32603, "Internal error (boom)"));
        let q = classify(
            json!({"jsonrpc": "2.0", "id": "u-1", "method": "session/request_permission", "params": {}}),
        );
        assert!(matches!(q, Some(Incoming::Request { id, .. }) if id == "u-1"));
        let n = classify(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"x": 1}}));
        assert!(
            matches!(n, Some(Incoming::Notification { method, .. }) if method == "session/update")
        );
        assert_eq!(classify(json!({"jsonrpc": "2.0", "id": 1})), None);
        assert_eq!(classify(json!([1])), None);
        let odd = classify(json!({"id": 1, "error": "text"}));
        assert!(
            matches!(odd, Some(Incoming::Response { outcome: Err(RpcError { message, .. }), .. }) if message == "\"text\"")
        );
    }

    #[test]
    fn ids_round_trip() {
        for id in [json!(0), json!("0"), json!("595adf42-1ffe")] {
            assert_eq!(id_value(&id_key(&id)), id);
        }
        assert_eq!(id_value("not json"), json!("not json"));
        let l = result(&json!("a"), json!({"outcome": {"outcome": "cancelled"}}));
        assert_eq!(l.last(), Some(&b'\n'));
        assert_eq!(l.iter().filter(|&&b| b == b'\n').count(), 1);
    }
}
