//! Messages for running agents: a run whose CLI takes follow-up user messages on its open stdin
//! registers here while it runs; a caller's message reaches the run's pump, which queues it.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::{mpsc, oneshot};

/// One message on its way to a run, with where to say whether it was taken.
#[derive(Debug)]
pub(crate) struct Input {
    pub text: String,
    /// `Err(why)`: the run could not take it (stopping, or its input already closed).
    pub reply: oneshot::Sender<Result<(), String>>,
}

/// The runs of this engine that take messages now, by id.
#[derive(Debug, Default)]
pub(crate) struct Inputs {
    map: Mutex<HashMap<String, mpsc::Sender<Input>>>,
}

/// A run's place in [`Inputs`], given up when dropped (the run has ended).
#[derive(Debug)]
pub(crate) struct Registration<'a> {
    inputs: &'a Inputs,
    id: String,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.inputs.lock().remove(&self.id);
    }
}

/// What became of a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Taken: written to the agent's stdin when its current turn ends.
    Accepted,
    /// The run could not take it; why.
    Refused(String),
    /// No run of this engine with that id takes messages.
    NotHere,
}

impl Inputs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<Input>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register run `id`; its pump reads the returned receiver.
    pub fn register(&self, id: &str) -> (Registration<'_>, mpsc::Receiver<Input>) {
        // A few at once: a caller waits for its message to be taken before sending the next.
        let (tx, rx) = mpsc::channel(16);
        self.lock().insert(id.to_owned(), tx);
        (Registration { inputs: self, id: id.to_owned() }, rx)
    }

    /// Hand `text` to run `id` and wait until its pump has taken it (or refused).
    pub async fn send(&self, id: &str, text: String) -> Delivery {
        let Some(tx) = self.lock().get(id).cloned() else { return Delivery::NotHere };
        let (reply, answer) = oneshot::channel();
        if tx.send(Input { text, reply }).await.is_err() {
            return Delivery::NotHere;
        }
        match answer.await {
            Ok(Ok(())) => Delivery::Accepted,
            Ok(Err(why)) => Delivery::Refused(why),
            // The run ended with the message still queued.
            Err(_) => Delivery::Refused("it ended before taking the message".into()),
        }
    }
}

/// The next message for a pump that may have no receiver (then never ready).
pub(crate) async fn next(rx: &mut Option<mpsc::Receiver<Input>>) -> Option<Input> {
    match rx.as_mut() {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_message_reaches_a_registered_run_and_is_answered() {
        let inputs = Inputs::default();
        assert_eq!(inputs.send("r1", "hi".into()).await, Delivery::NotHere);
        let (reg, mut rx) = inputs.register("r1");
        let pump = tokio::spawn(async move {
            let first = rx.recv().await.unwrap();
            assert_eq!(first.text, "hi");
            first.reply.send(Ok(())).unwrap();
            let second = rx.recv().await.unwrap();
            second.reply.send(Err("its input is closed".into())).unwrap();
            rx
        });
        assert_eq!(inputs.send("r1", "hi".into()).await, Delivery::Accepted);
        assert_eq!(
            inputs.send("r1", "again".into()).await,
            Delivery::Refused("its input is closed".into())
        );
        let _rx = pump.await.unwrap();
        drop(reg);
        assert_eq!(inputs.send("r1", "late".into()).await, Delivery::NotHere);
    }
}
