//! The page decoder: any bytes give a view or an error; a view never panics when used.
#![no_main]
use cairn::page::{self, PageView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = page::span_pages(data);
    let _ = page::validate(data);
    if let Ok(view) = PageView::new(data) {
        for i in 0..view.len() {
            if let Ok(entry) = view.entry(i) {
                let _ = view.search(entry.key);
            }
        }
        let _ = view.search(b"probe");
        let _ = (view.first_key(), view.last_key());
    }
});
