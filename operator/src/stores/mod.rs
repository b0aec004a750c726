//! What the caches are made of, pure: what each cached object is reduced to
//! (`keep.rs`), and each store's index of objects by the stack they belong to
//! (`index.rs`). Opens no watch and knows nothing of which kinds are cached or why.

pub mod index;
pub mod keep;
