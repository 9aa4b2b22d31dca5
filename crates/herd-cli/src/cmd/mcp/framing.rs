//! `herd mcp`'s stdio framing in front of the MCP service: a line that is not JSON gets a
//! JSON-RPC parse error reply (a client must never wait for an answer that cannot come).

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// The longest request line read; a longer one is answered with a parse error and skipped.
const MAX_LINE: usize = 16 << 20;

/// The MCP service's ends of the framing (what it reads, what it writes) over `input` and
/// `output`, and the tasks that pump between them.
pub fn framed<R, W>(input: R, output: W) -> (DuplexStream, DuplexStream)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (service_in, mut to_service) = tokio::io::duplex(64 * 1024);
    let (from_service, service_out) = tokio::io::duplex(64 * 1024);
    let (lines_tx, mut lines_rx) = mpsc::channel::<Vec<u8>>(64);
    // Requests: JSON lines pass, anything else is answered here.
    let replies = lines_tx.clone();
    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line(&mut input, &mut line).await {
                Ok(Line::End) | Err(_) => break,
                Ok(Line::TooLong) => {
                    let m = format!("Parse error: a request line over {MAX_LINE} bytes");
                    let _ = replies.send(parse_error(&m)).await;
                }
                Ok(Line::Text) => {
                    let text = line.trim_ascii();
                    if text.is_empty() {
                        continue;
                    }
                    match serde_json::from_slice::<Value>(text) {
                        Ok(_) => {
                            if to_service.write_all(text).await.is_err()
                                || to_service.write_all(b"\n").await.is_err()
                            {
                                break;
                            }
                        }
                        Err(e) => {
                            let _ = replies.send(parse_error(&format!("Parse error: {e}"))).await;
                        }
                    }
                }
            }
        }
        // End of input: the service sees it and the session ends.
        let _ = to_service.shutdown().await;
    });
    // Replies of the service, whole lines, in order with the framing's own.
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_service).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            let mut bytes = l.into_bytes();
            bytes.push(b'\n');
            if lines_tx.send(bytes).await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut output = output;
        while let Some(bytes) = lines_rx.recv().await {
            if output.write_all(&bytes).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    (service_in, service_out)
}

enum Line {
    Text,
    TooLong,
    End,
}

/// Read one line into `buf` (without reading more than [`MAX_LINE`] bytes of it into memory).
async fn read_line<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if buf.is_empty() && !too_long { Line::End } else { Line::Text });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long && buf.len() + take <= MAX_LINE {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            too_long = true;
            buf.clear();
        }
        r.consume(take);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Text });
        }
    }
}

/// A JSON-RPC 2.0 parse error reply (its id is null: the request's id could not be read).
fn parse_error(message: &str) -> Vec<u8> {
    let mut v =
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": message}})
            .to_string()
            .into_bytes();
    v.push(b'\n');
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn json_passes_and_anything_else_gets_a_parse_error() {
        let (mut client, server_side) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(server_side);
        let (mut service_in, mut service_out) = framed(server_read, server_write);
        client
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}\nnot json\n\n")
            .await
            .unwrap();
        let mut got = vec![0u8; 64];
        let n = service_in.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}\n");
        service_out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n").await.unwrap();
        let mut lines = BufReader::new(client).lines();
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.push(
                serde_json::from_str::<Value>(&lines.next_line().await.unwrap().unwrap()).unwrap(),
            );
        }
        let err = seen.iter().find(|v| v["error"].is_object()).expect("a parse error reply");
        assert_eq!(err["error"]["code"], -32700);
        assert!(err["id"].is_null());
        assert!(seen.iter().any(|v| v["result"].is_object()), "the service's reply passes");
    }
}
