"""kiec's IR: types, ops, graphs, the builder, the verifier, the text form and the interpreter."""
