"""ir: the graph. Importing an ONNX model into onnx-graphsurgeon with names unique across scopes
(main graph, If/Loop/Scan bodies, model-local functions), writing it back with every attribute
typed, initializer placement per scope, topological order, the structural checks a model must
pass before any work, and the list of ops that only move values. Imports `io` and `errors`."""
