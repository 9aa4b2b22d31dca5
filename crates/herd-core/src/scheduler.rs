//! The plan scheduler as a pure state machine: outcomes in, actions out. It never starts a step
//! before its dependencies completed, never runs more than the bound, fails exactly the
//! descendants of a failure, retries, and finishes every step.

use std::collections::VecDeque;

/// Where a step is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepState {
    Pending,
    Running {
        attempt: u32,
    },
    Completed,
    Failed,
    /// A dependency failed; names the failed ancestor step (by index).
    DependencyFailed {
        step: usize,
    },
    /// Never started: the plan was cancelled or ran out of budget.
    Cancelled,
}

impl StepState {
    pub fn is_done(&self) -> bool {
        !matches!(self, Self::Pending | Self::Running { .. })
    }
}

/// What the executor must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start `step` (attempt 1, or a retry).
    Start { step: usize, attempt: u32 },
    /// Record that `step` will not run because `cause` failed.
    DependencyFailed { step: usize, cause: usize },
    /// Record that `step` will not run (cancel or budget).
    Skip { step: usize },
    /// Every step is done.
    Finished { all_completed: bool },
}

/// Scheduler state for one plan.
#[derive(Debug, Clone)]
pub struct Scheduler {
    states: Vec<StepState>,
    dependents: Vec<Vec<usize>>,
    waiting_on: Vec<usize>,
    retries: Vec<u32>,
    ready: VecDeque<usize>,
    running: usize,
    bound: usize,
    starting: bool,
    done: usize,
    finished: bool,
}

impl Scheduler {
    /// `deps[i]` are the steps `i` depends on; `retries[i]` re-runs allowed after a failure.
    pub fn new(deps: &[Vec<usize>], retries: &[u32], bound: usize) -> Self {
        let n = deps.len();
        let mut dependents = vec![Vec::new(); n];
        for (i, d) in deps.iter().enumerate() {
            for &j in d {
                dependents[j].push(i);
            }
        }
        let waiting_on: Vec<usize> = deps.iter().map(Vec::len).collect();
        let ready = (0..n).filter(|&i| waiting_on[i] == 0).collect();
        Self {
            states: vec![StepState::Pending; n],
            dependents,
            waiting_on,
            retries: retries.to_vec(),
            ready,
            running: 0,
            bound: bound.max(1),
            starting: true,
            done: 0,
            finished: false,
        }
    }

    pub fn states(&self) -> &[StepState] {
        &self.states
    }

    pub fn running(&self) -> usize {
        self.running
    }

    /// Steps ready to start but waiting for a slot.
    pub fn queued(&self) -> usize {
        self.ready.len()
    }

    /// The first actions.
    pub fn start(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        self.fill(&mut out);
        out
    }

    /// `step` finished; `ok` says whether it completed. A failure may be retried.
    pub fn on_finished(&mut self, step: usize, ok: bool) -> Vec<Action> {
        self.finished_step(step, ok, true)
    }

    /// `step` failed and must not be retried (it was cancelled).
    pub fn on_failed_final(&mut self, step: usize) -> Vec<Action> {
        self.finished_step(step, false, false)
    }

    fn finished_step(&mut self, step: usize, ok: bool, may_retry: bool) -> Vec<Action> {
        let mut out = Vec::new();
        let StepState::Running { attempt } = self.states[step] else { return out };
        self.running -= 1;
        if ok {
            self.mark(step, StepState::Completed);
            for k in self.dependents[step].clone() {
                self.waiting_on[k] -= 1;
                if self.waiting_on[k] == 0 && self.states[k] == StepState::Pending {
                    self.ready.push_back(k);
                }
            }
        } else if may_retry && self.starting && self.retries[step] > 0 {
            self.retries[step] -= 1;
            self.running += 1;
            self.states[step] = StepState::Running { attempt: attempt + 1 };
            out.push(Action::Start { step, attempt: attempt + 1 });
        } else {
            self.mark(step, StepState::Failed);
            self.cascade(step, &mut out);
        }
        self.fill(&mut out);
        out
    }

    /// Start nothing new (cancel, budget spent); pending steps are skipped as they come up.
    pub fn stop_starting(&mut self) -> Vec<Action> {
        self.starting = false;
        let mut out = Vec::new();
        for i in 0..self.states.len() {
            if self.states[i] == StepState::Pending {
                self.mark(i, StepState::Cancelled);
                out.push(Action::Skip { step: i });
            }
        }
        self.ready.clear();
        self.check_finished(&mut out);
        out
    }

    fn mark(&mut self, step: usize, s: StepState) {
        if !self.states[step].is_done() {
            self.done += 1;
        }
        self.states[step] = s;
    }

    /// Fail every pending descendant of `failed`.
    fn cascade(&mut self, failed: usize, out: &mut Vec<Action>) {
        let mut stack = self.dependents[failed].clone();
        while let Some(k) = stack.pop() {
            if self.states[k] == StepState::Pending {
                self.mark(k, StepState::DependencyFailed { step: failed });
                out.push(Action::DependencyFailed { step: k, cause: failed });
                stack.extend(self.dependents[k].iter().copied());
            }
        }
        self.ready.retain(|&r| self.states[r] == StepState::Pending);
    }

    fn fill(&mut self, out: &mut Vec<Action>) {
        while self.starting && self.running < self.bound {
            let Some(i) = self.ready.pop_front() else { break };
            if self.states[i] != StepState::Pending {
                continue;
            }
            self.states[i] = StepState::Running { attempt: 1 };
            self.running += 1;
            out.push(Action::Start { step: i, attempt: 1 });
        }
        self.check_finished(out);
    }

    fn check_finished(&mut self, out: &mut Vec<Action>) {
        if !self.finished && self.done == self.states.len() {
            self.finished = true;
            let all = self.states.iter().all(|s| *s == StepState::Completed);
            out.push(Action::Finished { all_completed: all });
        }
    }
}

#[cfg(test)]
mod tests;
