//! Loops and runaway nesting in a PDF's object graph, found before the interpreters walk it.
//!
//! lopdf and pdf-extract follow a PDF's links recursively without remembering where they
//! have been, so a damaged or hostile file can make them run forever:
//! - a page whose `Parent` chain loops: pdf-extract's inherited-attribute lookup (for
//!   `Resources`, `MediaBox`) never ends (a hang);
//! - a form XObject that draws itself, directly (`/X Do` inside X) or through others, or
//!   forms nested thousands deep: pdf-extract's `Do` recurses until the stack overflows;
//! - an outline whose `First`/`Next` links loop, or a named-destination tree whose `Kids`
//!   loop: lopdf's outline reader recurses until the stack overflows, or loops.
//!
//! A stack overflow aborts the whole process (no `catch_unwind` stops it), so one such
//! file would take a running service down. These walks see every link the interpreters
//! would follow, remember what they have seen, and stop at a bound; the reader then skips
//! what would loop (a page is reported unreadable, a damaged outline is no outline). Found
//! by fuzzing (`fuzz/fuzz_targets/pdf.rs`, RELIABILITY.md); written here because neither
//! crate bounds these walks.

use lopdf::{Dictionary, Document, Object, ObjectId};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Forms drawn inside forms deeper than this make a page unreadable (real files nest a
/// few levels).
pub(super) const MAX_FORM_DEPTH: usize = 32;
/// Form drawings per page beyond this make it unreadable (forms that each draw the next
/// twice, 40 deep, would be a trillion drawings).
pub(super) const MAX_FORM_CALLS: usize = 10_000;
/// A page tree deeper than this is taken for a loop.
const MAX_TREE_DEPTH: usize = 256;
/// Outline entries and name-tree nodes walked at most.
const MAX_NODES: usize = 200_000;

/// Why page `id` cannot be interpreted safely, if it cannot.
pub(super) fn page_problem(doc: &Document, id: ObjectId, forms: &mut Forms) -> Option<String> {
    let Ok(page) = doc.get_dictionary(id) else {
        return None;
    };
    let Some(resources) = inherited_resources(doc, page) else {
        return Some("its page tree loops (a Parent link leads back to itself)".into());
    };
    let content = doc.get_page_content(id).unwrap_or_default();
    let mut walk = FormWalk {
        doc,
        forms,
        stack: Vec::new(),
        calls: 0,
    };
    walk.visit(&content, resources).err()
}

/// The page's `Resources` as pdf-extract finds them (the page's own, else the nearest
/// ancestor's); `None` when the `Parent` chain loops or is deeper than any real tree.
fn inherited_resources<'a>(
    doc: &'a Document,
    page: &'a Dictionary,
) -> Option<Option<&'a Dictionary>> {
    let mut seen = HashSet::new();
    let mut node = page;
    let mut found = None;
    for _ in 0..MAX_TREE_DEPTH {
        if found.is_none() {
            found = node.get(b"Resources").ok().and_then(|r| deref_dict(doc, r));
        }
        let Some(parent) = node.get(b"Parent").ok().and_then(|p| p.as_reference().ok()) else {
            return Some(found);
        };
        if !seen.insert(parent) {
            return None;
        }
        match doc.get_dictionary(parent) {
            Ok(p) => node = p,
            Err(_) => return Some(found),
        }
    }
    None
}

fn deref_dict<'a>(doc: &'a Document, o: &'a Object) -> Option<&'a Dictionary> {
    match o {
        Object::Reference(id) => doc.get_dictionary(*id).ok(),
        o => o.as_dict().ok(),
    }
}

/// The names each form's content draws with `Do`, decoded once per document.
#[derive(Default)]
pub(super) struct Forms {
    drawn: HashMap<ObjectId, Rc<[Vec<u8>]>>,
}

/// One page's walk through the forms it draws, as pdf-extract's `Do` would take it.
struct FormWalk<'d, 'f> {
    doc: &'d Document,
    forms: &'f mut Forms,
    stack: Vec<ObjectId>,
    calls: usize,
}

impl<'d> FormWalk<'d, '_> {
    fn visit(&mut self, content: &[u8], resources: Option<&'d Dictionary>) -> Result<(), String> {
        self.visit_names(&drawn_names(content), resources)
    }

    fn visit_names(
        &mut self,
        names: &[Vec<u8>],
        resources: Option<&'d Dictionary>,
    ) -> Result<(), String> {
        let Some(xobjects) = resources
            .and_then(|r| r.get(b"XObject").ok())
            .and_then(|x| deref_dict(self.doc, x))
        else {
            return Ok(());
        };
        for name in names {
            let Ok(Object::Reference(id)) = xobjects.get(name) else {
                // A stream is always an indirect object: anything else draws nothing.
                continue;
            };
            let id = *id;
            let Ok(form) = self.doc.get_object(id).and_then(Object::as_stream) else {
                continue;
            };
            if self.stack.contains(&id) {
                return Err(format!("a form ({} {} R) draws itself", id.0, id.1));
            }
            if self.stack.len() >= MAX_FORM_DEPTH {
                return Err(format!("its forms nest more than {MAX_FORM_DEPTH} deep"));
            }
            self.calls += 1;
            if self.calls > MAX_FORM_CALLS {
                return Err(format!("it draws forms more than {MAX_FORM_CALLS} times"));
            }
            let own = form
                .dict
                .get(b"Resources")
                .ok()
                .and_then(|r| deref_dict(self.doc, r));
            let inner = match self.forms.drawn.get(&id) {
                Some(names) => Rc::clone(names),
                None => {
                    let content = if form.filters().is_ok() {
                        form.decompressed_content()
                            .unwrap_or_else(|_| form.content.clone())
                    } else {
                        form.content.clone()
                    };
                    let names: Rc<[Vec<u8>]> = drawn_names(&content).into();
                    self.forms.drawn.insert(id, Rc::clone(&names));
                    names
                }
            };
            if inner.is_empty() {
                continue;
            }
            self.stack.push(id);
            self.visit_names(&inner, own.or(resources))?;
            self.stack.pop();
        }
        Ok(())
    }
}

/// The operand names of a content stream's `Do` operators, in order.
fn drawn_names(content: &[u8]) -> Vec<Vec<u8>> {
    let Ok(content) = lopdf::content::Content::decode(content) else {
        return Vec::new();
    };
    content
        .operations
        .iter()
        .filter(|op| op.operator == "Do")
        .filter_map(|op| {
            op.operands
                .first()
                .and_then(|o| o.as_name().ok())
                .map(<[u8]>::to_vec)
        })
        .collect()
}

/// Whether lopdf's outline reader can walk the outline and the named destinations it
/// resolves against without looping: each node reached once, trees no deeper than any
/// real one.
pub(super) fn outline_is_sound(doc: &Document) -> bool {
    let Ok(catalog) = doc.catalog() else {
        return true;
    };
    let mut seen = HashSet::new();
    let mut budget = MAX_NODES;
    if let Ok(outlines) = catalog.get(b"Outlines") {
        // lopdf recurses into `First` and loops along `Next`.
        let links: &[(&[u8], bool)] = &[(b"First", true), (b"Next", false)];
        if !links_are_a_tree(doc, outlines, links, &mut seen, &mut budget) {
            return false;
        }
    }
    let dests = catalog.get(b"Dests").ok().or_else(|| {
        let names = catalog
            .get(b"Names")
            .ok()
            .and_then(|n| deref_dict(doc, n))?;
        names.get(b"Dests").ok()
    });
    match dests {
        Some(tree) => links_are_a_tree(doc, tree, &[(b"Kids", true)], &mut seen, &mut budget),
        None => true,
    }
}

/// Walks from `root` along the `links` (each a key, and whether the reader recurses into
/// it; a link is a reference, a dictionary, or an array of them) and says whether every
/// node is reached once, within the depth and node bounds.
fn links_are_a_tree(
    doc: &Document,
    root: &Object,
    links: &[(&[u8], bool)],
    seen: &mut HashSet<ObjectId>,
    budget: &mut usize,
) -> bool {
    // An explicit stack: the walk itself must not recurse on the file's say-so.
    let mut todo: Vec<(&Object, usize)> = vec![(root, 0)];
    while let Some((link, depth)) = todo.pop() {
        if depth > MAX_TREE_DEPTH || *budget == 0 {
            return false;
        }
        *budget -= 1;
        let node = match link {
            Object::Reference(id) => {
                if !seen.insert(*id) {
                    return false;
                }
                match doc.get_object(*id) {
                    Ok(o) => o,
                    Err(_) => continue,
                }
            }
            o => o,
        };
        match node {
            Object::Dictionary(d) => {
                for (key, deeper) in links {
                    if let Ok(next) = d.get(key) {
                        todo.push((next, depth + usize::from(*deeper)));
                    }
                }
            }
            Object::Array(items) => todo.extend(items.iter().map(|i| (i, depth))),
            _ => {}
        }
    }
    true
}
