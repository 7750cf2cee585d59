//! Running end-to-end cases that share one environment: a harness of named cases ([`Suite`]),
//! or one value shared by the tests of a binary that run at the same time ([`shared`]).

use std::time::Instant;

/// One `T` for the tests of a binary that run at the same time: the first caller makes it, the
/// others share it, and it is dropped (its processes stopped) when the last of them ends. Each
/// test keeps the `Arc` for as long as it runs, so `cargo test NAME` runs one case alone and a
/// whole file shares one environment.
pub fn shared<T>(
    slot: &'static std::sync::Mutex<std::sync::Weak<T>>,
    make: impl FnOnce() -> T,
) -> std::sync::Arc<T> {
    let mut weak = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(t) = weak.upgrade() {
        return t;
    }
    let t = std::sync::Arc::new(make());
    *weak = std::sync::Arc::downgrade(&t);
    t
}

/// The end-to-end cases of one test binary, sharing one environment, run by a `libtest-mimic`
/// harness (the binary's `[[test]]` has `harness = false`). Each case is a test of its own, so
/// `cargo test --test FILE -- NAME` runs just that case and a failure names it. The environment
/// is made by the first case that runs (a `--list`, or a filter that matches nothing, starts
/// nothing); a failed setup fails every case with its message instead of being tried again. The
/// cases share state and processes, so they run one at a time, in the order they were added,
/// and the environment is dropped (its processes stopped) when the run ends.
///
/// ```no_run
/// use kube_api_rewriter_testkit::{ControlPlane, Suite};
///
/// fn main() -> std::process::ExitCode {
///     Suite::new(ControlPlane::up)
///         .case("namespaces", |cp| {
///             kube_api_rewriter_testkit::ok(&cp.kubectl(&["get", "ns", "default"]));
///         })
///         .run()
/// }
/// ```
pub struct Suite<E> {
    setup: Box<dyn FnOnce() -> E + Send>,
    cases: Vec<(String, Case<E>)>,
    on_failure: Option<Hook<E>>,
}

type Case<E> = Box<dyn Fn(&E) + Send + Sync>;
type Hook<E> = std::sync::Arc<dyn Fn(&E) + Send + Sync>;

/// The environment of a [`Suite`], made by the first case that needs it.
struct Lazy<E> {
    setup: Option<Box<dyn FnOnce() -> E + Send>>,
    env: Option<E>,
    broken: Option<String>,
}

impl<E> Lazy<E> {
    fn get(&mut self) -> Result<&E, libtest_mimic::Failed> {
        if let Some(why) = &self.broken {
            return Err(format!("no environment: {why}").into());
        }
        if self.env.is_none() {
            let setup = self.setup.take().expect("set up once");
            let t = Instant::now();
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(setup)) {
                Ok(e) => self.env = Some(e),
                Err(p) => {
                    let why = format!("setup failed: {}", panic_message(&*p));
                    self.broken = Some(why.clone());
                    return Err(why.into());
                }
            }
            eprintln!("--- setup in {:?}", t.elapsed());
        }
        Ok(self.env.as_ref().expect("made above"))
    }
}

/// The message of a panic's payload.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(no message)".to_owned())
}

impl<E: Send + 'static> Suite<E> {
    /// A suite whose environment `setup` makes.
    pub fn new(setup: impl FnOnce() -> E + Send + 'static) -> Suite<E> {
        Suite {
            setup: Box::new(setup),
            cases: Vec::new(),
            on_failure: None,
        }
    }

    /// Adds the case `name`.
    #[must_use]
    pub fn case(mut self, name: &str, run: impl Fn(&E) + Send + Sync + 'static) -> Suite<E> {
        self.cases.push((name.to_owned(), Box::new(run)));
        self
    }

    /// What to print when a case fails (the logs of the environment's processes, say).
    #[must_use]
    pub fn on_failure(mut self, hook: impl Fn(&E) + Send + Sync + 'static) -> Suite<E> {
        self.on_failure = Some(std::sync::Arc::new(hook));
        self
    }

    /// Runs the cases the command line selects; the process's exit code.
    pub fn run(self) -> std::process::ExitCode {
        use std::sync::{Arc, Mutex, PoisonError};
        let mut args = libtest_mimic::Arguments::from_args();
        args.test_threads = Some(1);
        let lazy = Arc::new(Mutex::new(Lazy {
            setup: Some(self.setup),
            env: None,
            broken: None,
        }));
        let trials = self
            .cases
            .into_iter()
            .map(|(name, run)| {
                let lazy = Arc::clone(&lazy);
                let hook = self.on_failure.clone();
                libtest_mimic::Trial::test(name.clone(), move || {
                    let mut lazy = lazy.lock().unwrap_or_else(PoisonError::into_inner);
                    let env = lazy.get()?;
                    let t = Instant::now();
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(env)));
                    match r {
                        Ok(()) => {
                            eprintln!("--- {name}: ok in {:?}", t.elapsed());
                            Ok(())
                        }
                        Err(p) => {
                            eprintln!("--- {name}: FAILED after {:?}", t.elapsed());
                            if let Some(hook) = hook {
                                hook(env);
                            }
                            Err(panic_message(&*p).into())
                        }
                    }
                })
            })
            .collect();
        let conclusion = libtest_mimic::run(&args, trials);
        // Stops what the environment started, if a case made it.
        drop(lazy.lock().unwrap_or_else(PoisonError::into_inner).env.take());
        conclusion.exit_code()
    }
}
