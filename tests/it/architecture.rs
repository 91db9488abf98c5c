//! The crate's architecture, checked: its modules form a stack of layers, each using only its
//! own layer and those below it, and its folders (top-level modules) use each other without
//! cycles (see `docs/architecture.md`, "Layers").
//!
//! 0. base: `config`, `error`, `metrics`, `name`, `owner`, `shown`;
//! 1. transport (`src/transport/`): connections, scripts, dispatcher, pub/sub, sentinel, TLS;
//! 2. leases (`src/lease/`): the lease table, the watchdog, calls in doubt;
//! 3. the lock kit (`src/kit/`): shared client state, wait loop, in-flight calls, releases;
//! 4. primitives (`src/lock/`, `src/sync/`, `src/multi/`, `src/inspect.rs`);
//! 5. the top: `client` (connecting), `blocking`, the model checks (`src/model/`, tests only);
//! 6. `lib.rs`, which may use anything.
//!
//! # How it reads the sources
//!
//! [`check`] is a pure function: source files in (their paths under `src/` and their text), a
//! [`Report`] out. It parses every file with `syn::parse_file` and walks the whole syntax tree
//! (a `syn::visit::Visit`), so it sees every path, wherever it is written and however it is
//! laid out: `use` trees (grouped, nested, renamed, globs), and the paths of expressions, types,
//! patterns, trait bounds, impl headers and struct literals. Paths inside macro calls
//! (`assert!(..)`, `tokio::select! {..}`, `macro_rules!` bodies) are read from the macro's tokens.
//! A string literal is one token, so nothing in it is taken for a path, and nothing after it is
//! missed; comments, doc comments (intra-doc links) and attribute arguments are not code and are
//! not read.
//!
//! Each path is resolved to the module it names, from the module of the file it is in
//! (`src/kit/wait.rs` is `kit::wait`, `src/kit/mod.rs` is `kit`, and `src/config.rs` with
//! `src/config/` is one module `config`), and from any inline `mod` it is written in:
//! `crate::a::b` is `a::b`, `super::` climbs one module per `super`, `self::` stays, and a bare
//! path that starts with a `mod` declared in the same scope is relative to it. Other bare paths
//! (`std::..`, `fred::..`, or a name a `use` brought in, whose `use` is checked itself) are not
//! the crate's modules. What counts is the first module after the crate root, the *folder*: a
//! name the crate root re-exports (`crate::Lock`) counts as the module that defines it.
//!
//! Code under `#[cfg(test)]` (unit tests, test helpers) is counted like the rest: it has no
//! reason to reach up either, and today it does not.
//!
//! # The rules
//!
//! * A file of layer *n* may name only modules of layer *n* or below.
//! * A path must name a module or a root item that the map below places: a new module needs its
//!   layer in [`MODULES`], a new re-export in `lib.rs` its defining module in [`ROOT_ITEMS`]
//!   (the test says so), and `lib.rs`'s `pub use` items must agree with [`ROOT_ITEMS`].
//! * The folders form no cycle: from the resolved paths the checker builds the graph "folder A
//!   names folder B" and fails on every cycle in it, naming the folders and the paths that make
//!   each edge. Files of one folder may use each other freely (a cycle inside a folder is fine).
//!   A known cycle can be waived, by name and with a reason, in [`ALLOWED_CYCLES`].
//!
//! # Shown to bite
//!
//! The tests in [`planted`] feed the checker small in-memory crates with one violation each and
//! assert it is reported, among them the three that the earlier line-matching test let through:
//! a grouped import (`use crate::{kit::ClientInner};` in `transport/mod.rs`), a `super::` path
//! out of its folder (`use super::super::lock::Lock;` in `kit/wait.rs`), and a path after a
//! string on the same line (`let url = "redis://x"; let l: crate::lock::Lock;`), each reported
//! as (planted in those files of an in-memory crate; planted in the real ones, the real test says
//! the same with their line numbers):
//!
//! ```text
//! src/transport/mod.rs:1: `crate::kit::ClientInner` reaches up: `transport` is layer 1, `kit` layer 3 (..)
//! src/kit/wait.rs:1: `super::super::lock::Lock` (= `crate::lock::Lock`) reaches up: `kit` is layer 3, `lock` layer 4 (..)
//! src/transport/dispatch.rs:2: `crate::lock::Lock` reaches up: `transport` is layer 1, `lock` layer 4 (..)
//! ```
//!
//! and a cycle between two folders of one layer as
//!
//! ```text
//! folder cycle lock -> sync -> lock (folders that reach each other: lock, sync); its edges:
//!     lock -> sync:
//!         src/lock/reentrant.rs:1: `crate::sync::Semaphore`
//!     sync -> lock:
//!         src/sync/mod.rs:1: `crate::Lock`
//! ```
//!
//! The real test,
//! [`the_crate_keeps_its_layers_and_has_no_folder_cycles`], checks `src/` (except `src/bin/`,
//! the command-line tool, which uses only the public API).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::Path;

use proc_macro2::{Delimiter, Spacing, Span, TokenStream, TokenTree};
use syn::visit::{self, Visit};

// The map.

/// The top-level modules (the folders) and their layers. A new module goes here.
const MODULES: &[(&str, u8)] = &[
    ("clock", 0),
    ("config", 0),
    ("error", 0),
    ("metrics", 0),
    ("name", 0),
    ("owner", 0),
    ("shown", 0),
    ("wait_for", 0),
    // The re-exported crate (`crate::fred`), not a module of ours.
    ("fred", 0),
    ("transport", 1),
    ("lease", 2),
    ("kit", 3),
    ("lock", 4),
    ("inspect", 4),
    ("deadlock", 4),
    ("multi", 4),
    ("sync", 4),
    ("client", 5),
    ("blocking", 5),
    // The model checks (tests only), which drive the kit and the transport.
    ("model", 5),
];

/// The items that `lib.rs` re-exports at the crate root, by the module that defines them, so
/// that `crate::Lock` counts as `lock`. A new `pub use` in `lib.rs` goes here.
const ROOT_ITEMS: &[(&str, &[&str])] = &[
    (
        "config",
        &[
            "Config",
            "ConfigBuilder",
            "DeadlockDetection",
            "KeyspaceEvents",
            "PublishMode",
            "SyncedWrites",
            "TlsOptions",
            "WhenUnavailable",
        ],
    ),
    ("error", &["Error", "Result"]),
    ("owner", &["Owner"]),
    ("wait_for", &["Deadlock", "WaitStep"]),
    (
        "kit",
        &[
            "Client",
            "Acquisition",
            "Attempt",
            "WokenBy",
            "BackOff",
            "Guard",
            "Handle",
            "Protocol",
            "RemainingTtl",
        ],
    ),
    (
        "lock",
        &[
            "Lock",
            "LockGuard",
            "FencedLock",
            "FencedGuard",
            "FairLock",
            "FairGuard",
            "ReadWriteLock",
            "ReadLock",
            "WriteLock",
            "ReadGuard",
            "WriteGuard",
            "SpinLock",
            "SpinGuard",
            "NonReentrantLock",
            "NonReentrantGuard",
            "NonReentrantFairLock",
            "NonReentrantFairGuard",
            "TokenLock",
            "TokenGuard",
        ],
    ),
    (
        "sync",
        &[
            "Semaphore",
            "SemaphorePermits",
            "CountDownLatch",
            "PermitExpirableSemaphore",
            "Permit",
            "PermitIdFormat",
        ],
    ),
    (
        "multi",
        &[
            "MultiLock",
            "MultiGuard",
            "RedLock",
            "TokenRedLock",
            "TokenRedGuard",
            "RedlockOptions",
        ],
    ),
];

/// Folder cycles known and accepted, each the set of its folders (sorted) and the reason. The
/// real test fails on any other cycle, and on an entry here that no longer matches a cycle.
const ALLOWED_CYCLES: &[(&[&str], &str)] = &[];

/// The layer of a top-level module.
fn layer_of_module(name: &str) -> Option<u8> {
    MODULES
        .iter()
        .find(|(module, _)| *module == name)
        .map(|(_, layer)| *layer)
}

/// The top-level module that a path's first name after the crate root stands for: a module
/// itself, or the module that defines a root item.
fn folder_of(name: &str) -> Option<&'static str> {
    if let Some((module, _)) = MODULES.iter().find(|(module, _)| *module == name) {
        return Some(module);
    }
    ROOT_ITEMS
        .iter()
        .find(|(_, items)| items.contains(&name))
        .map(|(module, _)| *module)
}

// The checker.

/// Where a path was found: for messages, and as the evidence of an edge of the folder graph.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Site {
    /// The file, as `src/...`.
    file: String,
    line: usize,
    /// The path as written (a `use` tree flattened to this one leaf).
    written: String,
    /// The path from the crate root, `crate::...`.
    resolved: String,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: `{}`", self.file, self.line, self.written)?;
        if self.written != self.resolved {
            write!(f, " (= `{}`)", self.resolved)?;
        }
        Ok(())
    }
}

/// How many paths a cycle's message shows for each of its edges.
const SITES_SHOWN: usize = 5;

/// What the checker objects to.
#[derive(Debug)]
enum Violation {
    /// A file that does not parse.
    Unparsed { file: String, error: String },
    /// A file in a top-level module that [`MODULES`] does not place.
    UnplacedFile { file: String, module: String },
    /// A path whose first name after the crate root is neither a module nor a root item.
    UnplacedPath { site: Site, name: String },
    /// A glob import of the crate root (`use crate::*;`, or `use super::*;` in a top-level
    /// module), which takes every root item: name them instead.
    RootGlob { site: Site },
    /// A `pub use` in `lib.rs` that [`ROOT_ITEMS`] lacks or places in another module.
    MapDisagrees {
        site: Site,
        item: String,
        defined_in: String,
        map: Option<String>,
    },
    /// A path that names a module of a higher layer.
    Upward {
        site: Site,
        from: String,
        from_layer: u8,
        to: String,
        to_layer: u8,
    },
    /// Folders that reach each other through the graph: `modules` (sorted), `cycle` one way
    /// round some of them (through the edge of the fewest paths), and the edges of that way
    /// round with the paths that make each.
    Cycle {
        modules: Vec<String>,
        cycle: Vec<String>,
        edges: Vec<(String, String, Vec<Site>)>,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let map = "the map in tests/it/architecture.rs";
        match self {
            Self::Unparsed { file, error } => write!(f, "{file}: does not parse: {error}"),
            Self::UnplacedFile { file, module } => write!(
                f,
                "{file}: module `{module}` is in no layer: add it to MODULES in {map}"
            ),
            Self::UnplacedPath { site, name } => write!(
                f,
                "{site}: `{name}` is neither a module nor a root item of {map}: add a module to \
                 MODULES (with its layer), a re-exported item to ROOT_ITEMS (with its module)"
            ),
            Self::RootGlob { site } => write!(
                f,
                "{site}: imports every root item; name the items, so that their layers are known"
            ),
            Self::MapDisagrees {
                site,
                item,
                defined_in,
                map: placed,
            } => match placed {
                None => write!(
                    f,
                    "{site}: lib.rs re-exports `{item}` from `{defined_in}`: add it to ROOT_ITEMS \
                     in {map}"
                ),
                Some(placed) => write!(
                    f,
                    "{site}: lib.rs re-exports `{item}` from `{defined_in}`, ROOT_ITEMS in {map} \
                     says `{placed}`"
                ),
            },
            Self::Upward {
                site,
                from,
                from_layer,
                to,
                to_layer,
            } => write!(
                f,
                "{site} reaches up: `{from}` is layer {from_layer}, `{to}` layer {to_layer} (a \
                 module may use only its own layer and those below)"
            ),
            Self::Cycle {
                modules,
                cycle,
                edges,
            } => {
                write!(
                    f,
                    "folder cycle {} (folders that reach each other: {}); its edges:",
                    cycle.join(" -> "),
                    modules.join(", ")
                )?;
                for (from, to, sites) in edges {
                    write!(f, "\n    {from} -> {to}:")?;
                    for site in sites.iter().take(SITES_SHOWN) {
                        write!(f, "\n        {site}")?;
                    }
                    if let Some(more) = sites.len().checked_sub(SITES_SHOWN).filter(|&n| n > 0) {
                        write!(f, "\n        ... and {more} more")?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// What [`check`] found: the violations, and the folder graph (each edge with the paths that
/// make it).
#[derive(Debug, Default)]
struct Report {
    violations: Vec<Violation>,
    edges: BTreeMap<(String, String), Vec<Site>>,
}

/// Checks the crate made of `sources`: each a path under `src/` (`kit/wait.rs`, `lib.rs`) and
/// the file's text.
fn check(sources: &[(&str, &str)]) -> Report {
    let mut report = Report::default();
    for &(path, text) in sources {
        let file = format!("src/{path}");
        let parsed = match syn::parse_file(text) {
            Ok(parsed) => parsed,
            Err(error) => {
                let at = error.span().start();
                let error = format!("{}:{}: {error}", at.line, at.column + 1);
                report.violations.push(Violation::Unparsed { file, error });
                continue;
            }
        };
        let module = module_of_file(path);
        let mut collector = Collector::new(module.clone());
        collector.visit_file(&parsed);
        let Some(folder) = module.first() else {
            // lib.rs may use anything; its re-exports must match the map.
            for found in collector.found {
                check_reexport(&file, found, &mut report.violations);
            }
            continue;
        };
        let Some(layer) = layer_of_module(folder) else {
            let module = folder.clone();
            report
                .violations
                .push(Violation::UnplacedFile { file, module });
            continue;
        };
        for found in collector.found {
            let site = found.site(&file);
            let Some(first) = found.target.first() else {
                if found.glob {
                    report.violations.push(Violation::RootGlob { site });
                }
                continue;
            };
            let Some(to) = folder_of(first) else {
                let name = first.clone();
                report
                    .violations
                    .push(Violation::UnplacedPath { site, name });
                continue;
            };
            let to_layer = layer_of_module(to).expect("every ROOT_ITEMS module is in MODULES");
            if to_layer > layer {
                report.violations.push(Violation::Upward {
                    site: site.clone(),
                    from: folder.clone(),
                    from_layer: layer,
                    to: to.to_owned(),
                    to_layer,
                });
            }
            if to != folder {
                let edge = (folder.clone(), to.to_owned());
                report.edges.entry(edge).or_default().push(site);
            }
        }
    }
    report.violations.extend(folder_cycles(&report.edges));
    report
}

/// The module of a file under `src/`: `kit/wait.rs` is `kit::wait`, `kit/mod.rs` and `kit.rs`
/// are `kit`, `lib.rs` is the crate root (no names).
fn module_of_file(path: &str) -> Vec<String> {
    let path = path.strip_suffix(".rs").unwrap_or(path);
    let mut module: Vec<String> = path.split('/').map(str::to_owned).collect();
    if module.last().is_some_and(|last| last == "mod") || module == ["lib"] {
        module.pop();
    }
    module
}

/// A `pub use` at the top of `lib.rs`, held against [`ROOT_ITEMS`].
fn check_reexport(file: &str, found: Found, violations: &mut Vec<Violation>) {
    let (Some(item), Some(defined_in)) = (&found.exported_as, found.target.first()) else {
        return;
    };
    if found.glob || layer_of_module(defined_in).is_none() {
        return;
    }
    let map = ROOT_ITEMS
        .iter()
        .find(|(_, items)| items.contains(&item.as_str()))
        .map(|(module, _)| (*module).to_owned());
    if map.as_deref() != Some(defined_in) {
        violations.push(Violation::MapDisagrees {
            site: found.site(file),
            item: item.clone(),
            defined_in: defined_in.clone(),
            map,
        });
    }
}

/// Every set of two or more folders that reach each other through the graph (a strongly
/// connected component), as one [`Violation::Cycle`].
fn folder_cycles(edges: &BTreeMap<(String, String), Vec<Site>>) -> Vec<Violation> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from.as_str()).or_default().insert(to.as_str());
        next.entry(to.as_str()).or_default();
    }
    let reaches: BTreeMap<&str, BTreeSet<&str>> = next
        .keys()
        .map(|&node| (node, reachable(&next, node)))
        .collect();
    let mut placed = BTreeSet::new();
    let mut cycles = Vec::new();
    for (&node, from_node) in &reaches {
        if placed.contains(node) || !from_node.contains(node) {
            continue;
        }
        let members: BTreeSet<&str> = from_node
            .iter()
            .copied()
            .filter(|other| reaches[other].contains(node))
            .collect();
        placed.extend(members.iter().copied());
        if members.len() < 2 {
            continue;
        }
        // Round the thinnest edge (the fewest paths), the likeliest mistake: it, then the
        // shortest way back.
        let inside = |(from, to): &(String, String)| {
            members.contains(from.as_str()) && members.contains(to.as_str())
        };
        let Some(((from, to), _)) = edges
            .iter()
            .filter(|(edge, _)| inside(edge))
            .min_by_key(|(_, sites)| sites.len())
        else {
            continue;
        };
        let mut cycle = vec![from.clone()];
        cycle.extend(shortest_way(to, from, &next, &members));
        let edges = cycle
            .windows(2)
            .map(|pair| {
                let edge = (pair[0].clone(), pair[1].clone());
                let sites = edges.get(&edge).cloned().unwrap_or_default();
                (edge.0, edge.1, sites)
            })
            .collect();
        cycles.push(Violation::Cycle {
            modules: members.iter().map(|&member| member.to_owned()).collect(),
            cycle,
            edges,
        });
    }
    cycles
}

/// The folders that `start` reaches through one edge or more.
fn reachable<'a>(next: &BTreeMap<&'a str, BTreeSet<&'a str>>, start: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![start];
    while let Some(at) = todo.pop() {
        for &to in next.get(at).into_iter().flatten() {
            if seen.insert(to) {
                todo.push(to);
            }
        }
    }
    seen
}

/// The shortest way from `start` to `end` (both included), through `members` only.
fn shortest_way(
    start: &str,
    end: &str,
    next: &BTreeMap<&str, BTreeSet<&str>>,
    members: &BTreeSet<&str>,
) -> Vec<String> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut todo = VecDeque::from([start]);
    while let Some(at) = todo.pop_front() {
        if at == end {
            break;
        }
        for &to in next.get(at).into_iter().flatten() {
            if members.contains(to) && to != start && !came_from.contains_key(to) {
                came_from.insert(to, at);
                todo.push_back(to);
            }
        }
    }
    let mut way = vec![end.to_owned()];
    let mut back = end;
    while let Some(&before) = came_from.get(back) {
        way.push(before.to_owned());
        back = before;
    }
    way.reverse();
    way
}

// Collecting and resolving the paths of one file.

/// A path that names the crate's modules, resolved from the crate root.
struct Found {
    line: usize,
    written: String,
    /// The modules (and item) from the crate root: `["kit", "ClientInner"]`.
    target: Vec<String>,
    /// A glob import (`use crate::kit::*;`).
    glob: bool,
    /// The name under which a `pub use` at the top of the file exports it (for `lib.rs`).
    exported_as: Option<String>,
}

impl Found {
    fn site(&self, file: &str) -> Site {
        let mut resolved = vec!["crate".to_owned()];
        resolved.extend(self.target.iter().cloned());
        if self.glob {
            resolved.push("*".to_owned());
        }
        Site {
            file: file.to_owned(),
            line: self.line,
            written: self.written.clone(),
            resolved: resolved.join("::"),
        }
    }
}

/// The syntax-tree walk over one file.
struct Collector {
    /// The module the walk is in: the file's module, then any inline `mod` it entered.
    module: Vec<String>,
    /// How many names of `module` are the file's own (the rest are inline modules).
    file_depth: usize,
    /// The `mod`s declared in each enclosing scope (the file, then each inline module).
    children: Vec<BTreeSet<String>>,
    found: Vec<Found>,
}

impl Collector {
    fn new(module: Vec<String>) -> Self {
        let file_depth = module.len();
        Self {
            module,
            file_depth,
            children: Vec::new(),
            found: Vec::new(),
        }
    }

    /// Resolves a path (its names and their spans) and keeps it if it names the crate's
    /// modules. `exported_as` is the name of a `pub use`.
    fn record(&mut self, segments: &[(String, Span)], glob: bool, exported_as: Option<String>) {
        let Some(((first, _), (_, last_span))) = segments.first().zip(segments.last()) else {
            return;
        };
        let declared_here = self
            .children
            .last()
            .is_some_and(|mods| mods.contains(first));
        let (mut target, mut at) = match first.as_str() {
            "crate" => (Vec::new(), 1),
            "self" => (self.module.clone(), 1),
            "super" => (self.module.clone(), 0),
            _ if declared_here => (self.module.clone(), 0),
            // Not the crate's: std, fred, an imported name, a local item.
            _ => return,
        };
        while segments.get(at).is_some_and(|(name, _)| name == "super") {
            if target.pop().is_none() {
                return; // Above the crate root: rustc refuses it.
            }
            at += 1;
        }
        target.extend(segments[at..].iter().map(|(name, _)| name.clone()));
        let mut written: Vec<&str> = segments.iter().map(|(name, _)| name.as_str()).collect();
        if glob {
            written.push("*");
        }
        self.found.push(Found {
            line: last_span.start().line,
            written: written.join("::"),
            target,
            glob,
            exported_as,
        });
    }

    /// Every leaf of a `use` tree, with the names before it.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<(String, Span)>, public: bool) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push((path.ident.to_string(), path.ident.span()));
                self.use_tree(&path.tree, prefix, public);
                prefix.pop();
            }
            syn::UseTree::Name(name) => self.use_leaf(&name.ident, &name.ident, prefix, public),
            syn::UseTree::Rename(rename) => {
                self.use_leaf(&rename.ident, &rename.rename, prefix, public);
            }
            syn::UseTree::Glob(glob) => {
                // The line is the star's.
                let mut segments = prefix.clone();
                if let Some(last) = segments.last_mut() {
                    last.1 = glob.star_token.spans[0];
                }
                self.record(&segments, true, None);
            }
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(tree, prefix, public);
                }
            }
        }
    }

    fn use_leaf(
        &mut self,
        ident: &syn::Ident,
        exported_as: &syn::Ident,
        prefix: &[(String, Span)],
        public: bool,
    ) {
        let mut segments = prefix.to_vec();
        let mut name = exported_as.to_string();
        // `use crate::kit::{self, wait};`: `self` is the prefix itself.
        match segments.last_mut() {
            Some(last) if ident == "self" => {
                last.1 = ident.span();
                if name == "self" {
                    name.clone_from(&last.0);
                }
            }
            _ => segments.push((ident.to_string(), ident.span())),
        }
        let at_top = self.module.len() == self.file_depth;
        let exported_as = (public && at_top).then_some(name);
        self.record(&segments, false, exported_as);
    }

    /// The paths in a macro's tokens: `crate::..`, `$crate::..`, `self::..`, `super::..`, up to
    /// the first token that is not `:: name` (a `{..}` group after `::` is a `use` group).
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut at = 0;
        while at < trees.len() {
            let TokenTree::Ident(ident) = &trees[at] else {
                if let TokenTree::Group(group) = &trees[at] {
                    self.macro_tokens(group.stream());
                }
                at += 1;
                continue;
            };
            at += 1;
            if !matches!(ident.to_string().as_str(), "crate" | "self" | "super") {
                continue;
            }
            let mut segments = vec![(ident.to_string(), ident.span())];
            while is_path_separator(&trees, at) {
                match trees.get(at + 2) {
                    Some(TokenTree::Ident(name)) => {
                        segments.push((name.to_string(), name.span()));
                        at += 3;
                    }
                    Some(TokenTree::Punct(star)) if star.as_char() == '*' => {
                        if let Some(last) = segments.last_mut() {
                            last.1 = star.span();
                        }
                        self.record(&segments, true, None);
                        segments.clear();
                        at += 3;
                        break;
                    }
                    Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
                        let tree = TokenStream::from(TokenTree::Group(group.clone()));
                        if let Ok(tree) = syn::parse2::<syn::UseTree>(tree) {
                            self.use_tree(&tree, &mut segments, false);
                            segments.clear();
                            at += 3;
                        }
                        break;
                    }
                    _ => break,
                }
            }
            if segments.len() > 1 {
                self.record(&segments, false, None);
            }
        }
    }
}

/// Whether `trees[at..]` starts with `::`.
fn is_path_separator(trees: &[TokenTree], at: usize) -> bool {
    match (trees.get(at), trees.get(at + 1)) {
        (Some(TokenTree::Punct(first)), Some(TokenTree::Punct(second))) => {
            first.as_char() == ':' && first.spacing() == Spacing::Joint && second.as_char() == ':'
        }
        _ => false,
    }
}

/// The names of the `mod` items among `items`.
fn mods_of(items: &[syn::Item]) -> BTreeSet<String> {
    items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(module) => Some(module.ident.to_string()),
            _ => None,
        })
        .collect()
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_file(&mut self, file: &'ast syn::File) {
        self.children.push(mods_of(&file.items));
        visit::visit_file(self, file);
        self.children.pop();
    }

    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        let Some((_, items)) = &module.content else {
            return; // `mod name;`: its file is checked on its own.
        };
        self.module.push(module.ident.to_string());
        self.children.push(mods_of(items));
        visit::visit_item_mod(self, module);
        self.children.pop();
        self.module.pop();
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_none() {
            let public = matches!(item.vis, syn::Visibility::Public(_));
            self.use_tree(&item.tree, &mut Vec::new(), public);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments: Vec<(String, Span)> = path
                .segments
                .iter()
                .map(|segment| (segment.ident.to_string(), segment.ident.span()))
                .collect();
            self.record(&segments, false, None);
        }
        visit::visit_path(self, path);
    }

    /// `pub(crate)`, `pub(super)`, `pub(in crate::kit)` say who may see an item; they use nothing.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.macro_tokens(mac.tokens.clone());
    }
}

// The real test.

/// The files of the library under `src/` (not `src/bin/`), as paths relative to it.
fn library_sources(src: &Path, dir: &Path, found: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read a folder of src/") {
        let path = entry.expect("a folder entry of src/").path();
        if path.is_dir() {
            // The command-line tool is a separate binary that uses only the public API.
            if path != src.join("bin") {
                library_sources(src, &path, found);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let relative = path.strip_prefix(src).expect("a file under src/");
            let relative: Vec<&str> = relative
                .components()
                .map(|part| part.as_os_str().to_str().expect("a UTF-8 file name"))
                .collect();
            let text = std::fs::read_to_string(&path).expect("read a source file");
            found.push((relative.join("/"), text));
        }
    }
}

#[test]
fn the_crate_keeps_its_layers_and_has_no_folder_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let mut files = Vec::new();
    library_sources(&src, &src, &mut files);
    files.sort();
    assert!(files.len() > 20, "found only {} sources", files.len());
    let sources: Vec<(&str, &str)> = files
        .iter()
        .map(|(path, text)| (path.as_str(), text.as_str()))
        .collect();
    let report = check(&sources);

    let mut allowed_met = BTreeSet::new();
    let violations: Vec<String> = report
        .violations
        .iter()
        .filter(|violation| {
            let Violation::Cycle { modules, .. } = violation else {
                return true;
            };
            let allowed = ALLOWED_CYCLES
                .iter()
                .position(|(allowed, _)| allowed == modules);
            allowed_met.extend(allowed);
            allowed.is_none()
        })
        .map(ToString::to_string)
        .collect();
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    for (at, (modules, _)) in ALLOWED_CYCLES.iter().enumerate() {
        assert!(
            allowed_met.contains(&at),
            "ALLOWED_CYCLES waives {modules:?}, which is no longer a cycle: remove the entry"
        );
    }

    // The checker saw the crate's paths: the kit names the leases and the transport, and the
    // primitives name the kit, through `use` trees and `super::` paths alike.
    for edge in [
        ("kit", "lease"),
        ("kit", "transport"),
        ("lock", "kit"),
        ("blocking", "lock"),
    ] {
        let edge = (edge.0.to_owned(), edge.1.to_owned());
        assert!(
            report.edges.contains_key(&edge),
            "no edge {edge:?} in {:?}",
            report.edges.keys()
        );
    }
    // Every item of the map is still re-exported by lib.rs (the reverse is checked by `check`).
    let (_, lib) = files
        .iter()
        .find(|(path, _)| path == "lib.rs")
        .expect("src/lib.rs among the sources");
    let lib = syn::parse_file(lib).expect("src/lib.rs parses");
    let mut collector = Collector::new(Vec::new());
    collector.visit_file(&lib);
    let exported: BTreeSet<String> = collector
        .found
        .into_iter()
        .filter_map(|found| found.exported_as)
        .collect();
    for (module, items) in ROOT_ITEMS {
        for item in *items {
            assert!(
                exported.contains(*item),
                "ROOT_ITEMS places `{item}` in `{module}`, but lib.rs does not re-export it: \
                 remove it from the map"
            );
        }
        assert!(
            layer_of_module(module).is_some(),
            "ROOT_ITEMS module `{module}` not in MODULES"
        );
    }
}

/// The checker against small in-memory crates, one violation planted in each.
mod planted {
    use super::{check, Violation};

    /// The messages of the violations that `check` reports for the crate made of `files`.
    fn violations(files: &[(&str, &str)]) -> Vec<String> {
        check(files)
            .violations
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Asserts that a violation is reported that says each of `says`. (A path that reaches up
    /// from a folder that the higher one uses also makes a cycle, reported besides.)
    fn reports(files: &[(&str, &str)], says: &[&str]) {
        let found = violations(files);
        assert!(
            found
                .iter()
                .any(|violation| says.iter().all(|part| violation.contains(part))),
            "no violation says all of {says:#?}; found {found:#?}"
        );
    }

    /// Asserts that exactly one violation is reported, and that it says each of `says`.
    fn reports_one(files: &[(&str, &str)], says: &[&str]) {
        let found = violations(files);
        assert_eq!(found.len(), 1, "expected one violation, got {found:#?}");
        reports(files, says);
    }

    /// A crate that keeps the rules, in every way of writing a path that the planted ones use.
    const CLEAN: &[(&str, &str)] = &[
        ("lib.rs", "mod kit; mod lock; mod transport; pub use lock::Lock;"),
        ("transport/mod.rs", "pub(crate) mod dispatch;\npub(crate) struct Redis;"),
        (
            "transport/dispatch.rs",
            "use super::Redis;\nfn f() { let url = \"crate::kit::x\"; let _: super::Redis; }",
        ),
        ("kit/mod.rs", "pub(crate) mod wait;\nuse crate::{transport::{self, Redis}};"),
        (
            "kit/wait.rs",
            "use super::super::transport::Redis;\nuse super::*;\n\
             fn f() { crate::transport::dispatch::send(); assert!(crate::kit::wait::ok()); }\n\
             #[cfg(test)] mod tests { use super::super::wait::f; use self::inner::g; mod inner {} }",
        ),
        (
            "lock/mod.rs",
            "pub(crate) struct Lock;\nimpl crate::kit::Client for Lock {}\n\
             fn f() -> crate::Lock { match x { crate::transport::Redis => {} } }",
        ),
    ];

    #[test]
    fn a_clean_crate_passes() {
        let report = check(CLEAN);
        let found: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
        assert!(found.is_empty(), "{found:#?}");
        let edges: Vec<_> = report.edges.keys().cloned().collect();
        let edge = |from: &str, to: &str| (from.to_owned(), to.to_owned());
        assert_eq!(
            edges,
            [
                edge("kit", "transport"),
                edge("lock", "kit"),
                edge("lock", "transport")
            ]
        );
    }

    /// (a) Hole 1 of the line-matching test: a grouped import.
    #[test]
    fn a_grouped_import_reaching_up_fails() {
        let mut files = CLEAN.to_vec();
        files[1] = (
            "transport/mod.rs",
            "use crate::{kit::ClientInner};\npub(crate) struct Redis;",
        );
        reports(
            &files,
            &[
                "src/transport/mod.rs:1: `crate::kit::ClientInner` reaches up",
                "`transport` is layer 1",
            ],
        );
    }

    /// (b) Hole 2: a `super::` path that climbs out of its folder (`super::super` is the root).
    #[test]
    fn a_super_path_out_of_its_folder_fails() {
        let mut files = CLEAN.to_vec();
        files[4] = ("kit/wait.rs", "use super::super::lock::Lock;");
        reports(
            &files,
            &[
                "src/kit/wait.rs:1: `super::super::lock::Lock` (= `crate::lock::Lock`) reaches up",
                "`kit` is layer 3, `lock` layer 4",
            ],
        );
    }

    /// (c) Hole 3: a string literal earlier on the line hid the path after it.
    #[test]
    fn a_path_after_a_string_on_its_line_fails() {
        let mut files = CLEAN.to_vec();
        files[2] = (
            "transport/dispatch.rs",
            "fn f() {\n    let url = \"redis://x\"; let l: crate::lock::Lock;\n}",
        );
        reports(
            &files,
            &["src/transport/dispatch.rs:2: `crate::lock::Lock` reaches up"],
        );
    }

    /// (d) Two folders of one layer that use each other: no layer is crossed, but they cycle.
    #[test]
    fn a_folder_cycle_fails() {
        let files = [
            ("lib.rs", "mod lock; mod sync;"),
            ("lock/mod.rs", "mod reentrant;"),
            ("lock/reentrant.rs", "use crate::sync::Semaphore;"),
            ("sync/mod.rs", "fn f() -> crate::Lock { todo!() }"),
        ];
        // As the module's docs show it.
        let expected = "folder cycle lock -> sync -> lock (folders that reach each other: lock, \
                        sync); its edges:\n    \
                        lock -> sync:\n        src/lock/reentrant.rs:1: `crate::sync::Semaphore`\n    \
                        sync -> lock:\n        src/sync/mod.rs:1: `crate::Lock`";
        assert_eq!(violations(&files), [expected]);
        let report = check(&files);
        assert!(matches!(
            &report.violations[0],
            Violation::Cycle { modules, .. } if modules == &["lock", "sync"]
        ));
    }

    /// Files of one folder may use each other round.
    #[test]
    fn a_cycle_inside_a_folder_passes() {
        let files = [
            ("lock/mod.rs", "mod a; mod b;"),
            ("lock/a.rs", "use super::b::B; pub(crate) struct A;"),
            ("lock/b.rs", "use crate::lock::a::A; pub(crate) struct B;"),
        ];
        assert!(violations(&files).is_empty());
    }

    /// (e) A path in an expression, not in a `use`.
    #[test]
    fn a_path_in_an_expression_fails() {
        let mut files = CLEAN.to_vec();
        files[4] = (
            "kit/wait.rs",
            "async fn f() {\n    let c = crate::client::connect(url).await;\n}",
        );
        reports(
            &files,
            &["src/kit/wait.rs:2: `crate::client::connect` reaches up"],
        );
    }

    /// A path inside a macro call, read from its tokens.
    #[test]
    fn a_path_in_a_macro_fails() {
        let mut files = CLEAN.to_vec();
        files[4] = (
            "kit/wait.rs",
            "fn f() { tracing::debug!(\"{}\", crate::lock::NAME); }",
        );
        reports(
            &files,
            &["src/kit/wait.rs:1: `crate::lock::NAME` reaches up"],
        );
    }

    /// A name the map does not know, and a file in a folder it does not know.
    #[test]
    fn unknown_modules_and_items_fail() {
        let files = [("kit/wait.rs", "use crate::Frob;"), ("newthing.rs", "")];
        let found = violations(&files);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found[0].contains("`Frob` is neither a module nor a root item"),
            "{}",
            found[0]
        );
        assert!(found[0].contains("ROOT_ITEMS"), "{}", found[0]);
        assert!(
            found[1].contains("module `newthing` is in no layer: add it to MODULES"),
            "{}",
            found[1]
        );
    }

    /// lib.rs re-exports an item the map places elsewhere, or not at all.
    #[test]
    fn a_reexport_the_map_disagrees_with_fails() {
        let files = [(
            "lib.rs",
            "mod kit; pub use kit::Lock; pub use kit::{Wobble as W};",
        )];
        let found = violations(&files);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found[0].contains("re-exports `Lock` from `kit`, ROOT_ITEMS"),
            "{}",
            found[0]
        );
        assert!(
            found[1].contains("re-exports `W` from `kit`: add it to ROOT_ITEMS"),
            "{}",
            found[1]
        );
    }

    /// `use super::*;` in a top-level module takes every root item.
    #[test]
    fn a_glob_of_the_crate_root_fails() {
        let files = [("transport/mod.rs", "use super::*;")];
        reports_one(
            &files,
            &["src/transport/mod.rs:1: `super::*` (= `crate::*`): imports every"],
        );
    }
}
