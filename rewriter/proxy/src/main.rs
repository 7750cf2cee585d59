//! `kube-api-rewriter`: the command-line tool (and, with no subcommand, the proxy).

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use kube_api_rewriter::object::{self, Context, Outcome};
use kube_api_rewriter::patch::{self, PatchType};
use kube_api_rewriter::rules::{Source, generate};
use kube_api_rewriter::stream::{ListRewriter, Shape, WatchRewriter, look_ahead};
use kube_api_rewriter::{BodyMode, ProxyMode, ResponseBody, Route};
use kube_api_rewriter::{Direction, Rules};
use kube_api_rewriter_proxy::config::{LogConfig, LogFormat, LogOutput, ProxyArgs};

mod spill;

/// Rename Kubernetes API groups on the way to kube-apiserver and restore them on the way back.
#[derive(Parser)]
#[command(name = "kube-api-rewriter", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the sidecar proxy (the default when no subcommand is given; settings from the
    /// environment, as the Go sidecar reads them, or from these flags).
    Proxy(Box<ProxyArgs>),
    /// Rewrite a body read from stdin and write it to stdout.
    Rewrite(RewriteArgs),
    /// Rewrite a request path (with query) and print it.
    RewritePath(RewritePathArgs),
    /// Check or generate rule files.
    #[command(subcommand)]
    Rules(RulesCommand),
}

#[derive(Args)]
struct RuleFiles {
    /// Rule files (YAML or JSON); the built-in KubeVirt rules when none is given.
    #[arg(long = "rules", value_name = "FILE")]
    rules: Vec<PathBuf>,
}

#[derive(Args)]
#[group(required = true, multiple = false)]
struct DirectionArgs {
    /// Client to server: original names become renamed ones (AdmissionReview: the response).
    #[arg(long)]
    rename: bool,
    /// Server to client: renamed names become original ones (AdmissionReview: the request).
    #[arg(long)]
    restore: bool,
}

impl DirectionArgs {
    fn get(&self) -> Direction {
        if self.rename {
            Direction::Rename
        } else {
            Direction::Restore
        }
    }
}

#[derive(Args)]
struct RewriteArgs {
    #[command(flatten)]
    rules: RuleFiles,
    #[command(flatten)]
    dir: DirectionArgs,
    /// HTTP method of the request the body belongs to.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Request path (with query): make the same decisions as the proxy.
    #[arg(long)]
    path: Option<String>,
    /// Content-Type of the body (selects the patch type for PATCH).
    #[arg(long)]
    content_type: Option<String>,
    /// The body is a watch event stream.
    #[arg(long)]
    watch: bool,
    /// The path is a webhook path (webhook proxy decisions); implied for the paths the rules name
    /// under `webhooks`.
    #[arg(long)]
    webhook: bool,
}

#[derive(Args)]
struct RewritePathArgs {
    #[command(flatten)]
    rules: RuleFiles,
    #[command(flatten)]
    dir: DirectionArgs,
    /// HTTP method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Path with query.
    #[arg(long)]
    path: String,
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Load rule files and report the first error with file, line and column.
    Check {
        /// Rule files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the names (group, kind, resource, label, annotation, finalizer) two rule files map
    /// differently: `-` the old mapping, `+` the new. Exit code 0: the same, 1: they differ.
    Diff {
        /// The rules in force.
        old: PathBuf,
        /// The rules to compare them with.
        new: PathBuf,
    },
    /// Write a rule file for the groups of CRD manifests.
    Generate {
        /// CRD manifests (YAML, several documents allowed).
        #[arg(long = "crd", required = true)]
        crd: Vec<PathBuf>,
        /// Group rename FROM=TO (FROM also matches as a suffix: `kubevirt.io` covers `clone.kubevirt.io`).
        #[arg(long = "group-map", required = true)]
        group_map: Vec<String>,
        /// Kind prefix.
        #[arg(long)]
        kind_prefix: String,
        /// Resource (plural/singular) prefix.
        #[arg(long)]
        resource_prefix: String,
        /// Short name prefix.
        #[arg(long)]
        short_name_prefix: String,
    },
}

/// An error the user caused: printed on one line, exit code 2.
#[derive(Debug)]
struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

fn bad(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.to_string()))
}

/// The proxy's settings alone, read from the environment when no subcommand is given.
#[derive(Parser)]
#[command(name = "kube-api-rewriter")]
struct ProxyFromEnv {
    #[command(flatten)]
    args: ProxyArgs,
}

/// Parses the command line; a usage error is one line and exit code 2.
fn parse<P: Parser>(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<P, ExitCode> {
    match P::try_parse_from(args) {
        Ok(p) => Ok(p),
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            let text = e.render().to_string();
            eprintln!("{}", first_line(&text));
            Err(ExitCode::from(2))
        }
    }
}

/// jemalloc keeps the buffers a streamed body frees for the next ones. With glibc's malloc, a
/// 50 MB LIST through the proxy cost it 1,000-6,000 page faults (memory handed back to the
/// kernel and touched afresh) and about 10% more CPU; peak RSS stays as low.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli: Cli = match parse(std::env::args_os()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let res = match cli.command {
        Some(Command::Rewrite(a)) => rewrite(a),
        Some(Command::RewritePath(a)) => rewrite_path(a),
        Some(Command::Rules(c)) => rules_cmd(c),
        Some(Command::Proxy(a)) => proxy(&a),
        None => match parse::<ProxyFromEnv>([std::ffi::OsString::from("kube-api-rewriter")]) {
            Ok(p) => proxy(&p.args),
            Err(code) => return code,
        },
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let user = e.downcast_ref::<BadInput>().is_some();
            eprintln!("error: {}", first_line(&format!("{e:#}")));
            if user {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn proxy(args: &ProxyArgs) -> anyhow::Result<()> {
    let cfg = args.resolve().map_err(bad)?;
    init_logging(cfg.log);
    let grace = cfg.deadlines.runtime_shutdown;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(kube_api_rewriter_proxy::app::run(cfg)).map_err(bad)?;
    // Upgraded connections (exec sessions) still open once the other connections have finished
    // end with the process: graceful shutdown does not wait for them.
    rt.shutdown_timeout(grace);
    Ok(())
}

fn init_logging(log: LogConfig) {
    use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt as _};
    let writer = match log.output {
        LogOutput::Stdout => BoxMakeWriter::new(io::stdout),
        LogOutput::Stderr => BoxMakeWriter::new(io::stderr),
        LogOutput::Discard => BoxMakeWriter::new(io::sink),
    };
    let writer = writer.with_max_level(log.level);
    let b = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_max_level(log.level)
        .with_target(false);
    let _ = match log.format {
        LogFormat::Json => b.json().flatten_event(true).try_init(),
        LogFormat::Text => b.with_ansi(false).try_init(),
        LogFormat::Pretty => b.pretty().try_init(),
    };
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

fn load_rules(files: &RuleFiles) -> anyhow::Result<Rules> {
    if files.rules.is_empty() {
        return Ok(Rules::builtin_kubevirt());
    }
    let texts = files
        .rules
        .iter()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let names: Vec<String> = files.rules.iter().map(|p| p.display().to_string()).collect();
    let sources: Vec<Source<'_>> = names
        .iter()
        .zip(&texts)
        .map(|(name, text)| Source { name, text })
        .collect();
    let rules = Rules::parse(&sources).map_err(bad)?;
    for w in rules.warnings() {
        eprintln!("warning: {w}");
    }
    Ok(rules)
}

fn rewrite_path(a: RewritePathArgs) -> anyhow::Result<()> {
    let rules = load_rules(&a.rules)?;
    let out = match a.dir.get() {
        Direction::Rename => Route::new(&rules, ProxyMode::Api, &a.method, &a.path)
            .upstream_path()
            .to_owned(),
        Direction::Restore => {
            kube_api_rewriter::path::rewrite(&rules, Direction::Restore, &a.path).map_err(bad)?
        }
    };
    println!("{out}");
    Ok(())
}

fn rules_cmd(c: RulesCommand) -> anyhow::Result<()> {
    match c {
        RulesCommand::Check { files } => {
            let rules = load_rules(&RuleFiles { rules: files.clone() })?;
            let resources: usize = rules.groups().iter().map(|g| g.resources.len()).sum();
            println!(
                "ok: {} groups, {} resources, {} webhooks, {} kind entries",
                rules.groups().len(),
                resources,
                rules.webhooks().len(),
                rules.kinds().len()
            );
            Ok(())
        }
        RulesCommand::Diff { old, new } => {
            // Exit code 1 means "they differ": an unreadable or invalid file is a usage error (2).
            let load =
                |f: PathBuf| load_rules(&RuleFiles { rules: vec![f] }).map_err(|e| bad(format!("{e:#}")));
            let (old, new) = (load(old)?, load(new)?);
            let lines = kube_api_rewriter::rules::diff::diff(&old, &new);
            if lines.is_empty() {
                return Ok(());
            }
            let mut out = io::stdout().lock();
            for l in lines {
                writeln!(out, "{l}").context("writing")?;
            }
            out.flush().context("writing")?;
            std::process::exit(1);
        }
        RulesCommand::Generate {
            crd,
            group_map,
            kind_prefix,
            resource_prefix,
            short_name_prefix,
        } => {
            let mut map = Vec::new();
            for m in group_map {
                let (f, t) = m
                    .split_once('=')
                    .ok_or_else(|| bad(format!("--group-map {m:?}: expected FROM=TO")))?;
                map.push((f.to_owned(), t.to_owned()));
            }
            let texts = crd
                .iter()
                .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let names: Vec<String> = crd.iter().map(|p| p.display().to_string()).collect();
            let files: Vec<(&str, &str)> = names
                .iter()
                .map(String::as_str)
                .zip(texts.iter().map(String::as_str))
                .collect();
            let opts = generate::Options {
                group_map: map,
                kind_prefix,
                resource_prefix,
                short_name_prefix,
            };
            let yaml = generate::generate(&files, &opts).map_err(bad)?;
            // The output must load: check it before printing.
            Rules::parse(&[Source {
                name: "generated",
                text: &yaml,
            }])
            .map_err(bad)?;
            io::stdout().write_all(yaml.as_bytes())?;
            Ok(())
        }
    }
}

/// Rewrites a whole body.
type WholeFn = Box<dyn FnOnce(&[u8]) -> kube_api_rewriter::Result<Vec<u8>>>;

/// How the body on stdin is rewritten.
enum Plan {
    Whole(WholeFn),
    List(Direction, Context),
    Watch(Direction, Context),
    Copy,
}

fn rewrite(a: RewriteArgs) -> anyhow::Result<()> {
    let rules: &'static Rules = Box::leak(Box::new(load_rules(&a.rules)?));
    let dir = a.dir.get();
    let ct = a.content_type.clone();
    let plan = match &a.path {
        Some(path) => {
            // A path the rules name as a webhook is one, as the webhook proxy sees it.
            let webhook = a.webhook || kube_api_rewriter::path::webhook_rule(rules, path).is_some();
            let mode = if webhook {
                ProxyMode::Webhook
            } else {
                ProxyMode::Api
            };
            let route = Route::new(rules, mode, &a.method, path);
            let request_side = dir == route.request_direction();
            if request_side {
                Plan::Whole(Box::new(move |b| {
                    Ok(route.request_body(rules, ct.as_deref(), b)?.body.into_owned())
                }))
            } else {
                let ct = ct.as_deref().or(Some("application/json"));
                match route.response_mode(200, ct) {
                    BodyMode::Pass => Plan::Copy,
                    BodyMode::List => Plan::List(dir, route.context().clone()),
                    BodyMode::Watch => Plan::Watch(dir, route.context().clone()),
                    BodyMode::Object => {
                        Plan::Whole(Box::new(move |b| match route.response_body(rules, b)? {
                            ResponseBody::Body(b) => Ok(b.into_owned()),
                            ResponseBody::NotFound(s) => Ok(s),
                        }))
                    }
                }
            }
        }
        None if a.watch => Plan::Watch(dir, Context::default()),
        None => match ct.as_deref().and_then(PatchType::from_content_type) {
            Some(ty) => Plan::Whole(Box::new(move |b| {
                let plan = patch::plan_for(rules, "", "");
                Ok(patch::rewrite(rules, dir, ty, b, plan)?.into_owned())
            })),
            None => Plan::List(dir, Context::default()),
        },
    };
    let mut out = spill::Spill::new()?;
    let mut stdin = io::stdin().lock();
    match plan {
        Plan::Copy => {
            io::copy(&mut stdin, &mut out)?;
        }
        Plan::Whole(f) => {
            let mut body = Vec::new();
            stdin.read_to_end(&mut body)?;
            out.write_all(&f(&body).map_err(bad)?)?;
        }
        Plan::Watch(dir, ctx) => {
            let mut w = WatchRewriter::new(rules, dir, ctx);
            pump(&mut stdin, &mut out, |chunk, o| w.feed(chunk, o))?;
            let mut tail = Vec::new();
            w.finish(&mut tail).map_err(bad)?;
            out.write_all(&tail)?;
        }
        Plan::List(dir, ctx) => list_or_object(rules, dir, ctx, &mut stdin, &mut out)?,
    }
    out.finish(&mut io::stdout().lock())?;
    Ok(())
}

/// Streams a LIST item by item; any other document is read whole and rewritten.
fn list_or_object(
    rules: &Rules,
    dir: Direction,
    ctx: Context,
    input: &mut impl Read,
    out: &mut spill::Spill,
) -> anyhow::Result<()> {
    let mut head = Vec::new();
    let mut chunk = vec![0u8; 256 * 1024];
    let mut eof = false;
    // Read until the top-level keys show whether this is a list.
    let is_list = loop {
        if let Some(shape) = look_ahead(&head, eof) {
            break shape == Shape::List;
        }
        let n = input.read(&mut chunk)?;
        if n == 0 {
            eof = true;
        }
        head.extend_from_slice(&chunk[..n]);
    };
    if !is_list {
        input.read_to_end(&mut head)?;
        return match object::rewrite(rules, dir, &head, &ctx).map_err(bad)? {
            Outcome::Object(b) => Ok(out.write_all(&b)?),
            Outcome::Excluded => Err(bad("the object is excluded by the rules (the proxy answers 404)")),
        };
    }
    let mut lr = ListRewriter::new(rules, dir, ctx);
    let mut buf = Vec::new();
    lr.feed(&head, &mut buf).map_err(bad)?;
    out.write_all(&buf)?;
    drop(head);
    pump(input, out, |c, o| lr.feed(c, o))?;
    let mut tail = Vec::new();
    lr.finish(&mut tail).map_err(bad)?;
    out.write_all(&tail)?;
    Ok(())
}

fn pump(
    input: &mut impl Read,
    out: &mut spill::Spill,
    mut feed: impl FnMut(&[u8], &mut Vec<u8>) -> kube_api_rewriter::Result<()>,
) -> anyhow::Result<()> {
    let mut chunk = vec![0u8; 256 * 1024];
    let mut buf = Vec::new();
    loop {
        let n = input.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.clear();
        feed(&chunk[..n], &mut buf).map_err(bad)?;
        out.write_all(&buf)?;
    }
}
