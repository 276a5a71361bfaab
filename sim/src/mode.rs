//! The world a seed runs in ([`Mode`]): one server or an ensemble, with the
//! server's crashes or not, in swarm mode or not; a batch's, or the one a
//! regression file names. It is the running thread's, so that one process
//! runs regressions of every world beside its batch.

/// The world a seed runs in: one server or an ensemble of `ensemble`
/// members, with the server's crashes (`--crash`) or not, in swarm mode
/// (`--swarm`) or not. A batch runs all its seeds in one; a regression
/// names its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mode {
    pub ensemble: Option<usize>,
    pub crash: bool,
    pub swarm: bool,
}

thread_local! {
    /// The mode of the seed this thread runs (see [`Mode::enter`]).
    static MODE: std::cell::Cell<Mode> = const {
        std::cell::Cell::new(Mode { ensemble: None, crash: false, swarm: false })
    };
}

impl Mode {
    /// The seeds of this thread run in this mode from now on.
    pub fn enter(self) {
        MODE.with(|mode| mode.set(self));
    }

    /// The mode of the seed this thread runs.
    pub fn current() -> Mode {
        MODE.with(std::cell::Cell::get)
    }

    /// Its words in a regression file and in a file's name (empty for one
    /// server without crashes or swarm mode).
    pub fn words(self) -> Vec<String> {
        let mut words = Vec::new();
        if let Some(size) = self.ensemble {
            words.push(format!("ensemble{size}"));
        }
        if self.crash {
            words.push("crash".to_owned());
        }
        if self.swarm {
            words.push("swarm".to_owned());
        }
        words
    }
}
