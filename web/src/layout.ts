// Lay out a LangGraph graph (GET /assistants/{id}/graph) top to bottom with dagre, as React Flow nodes and
// edges: conditional edges dashed and labelled, the running node and the nodes with breakpoints marked.
import dagre from "@dagrejs/dagre";
import type { Edge, Node } from "@xyflow/react";
import type { GraphShape } from "./api";

export interface NodeData extends Record<string, unknown> {
  label: string;
  /** the subgraph node it belongs to (expanded view: ids are "parent:child") */
  parent: string | null;
  running: boolean;
  breakpoint: boolean;
  terminal: boolean;
}

const WIDTH = 170;
const HEIGHT = 40;

export function edgeLabel(data: unknown): string | undefined {
  if (typeof data === "string") return data;
  if (data && typeof data === "object" && "label" in data) return String((data as { label: unknown }).label);
  return undefined;
}

export function layoutGraph(
  shape: GraphShape,
  running: ReadonlySet<string> = new Set(),
  breakpoints: ReadonlySet<string> = new Set(),
): { nodes: Node<NodeData>[]; edges: Edge[] } {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: "TB", nodesep: 40, ranksep: 60 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of shape.nodes) g.setNode(n.id, { width: WIDTH, height: HEIGHT });
  shape.edges.forEach((e, i) => {
    if (g.hasNode(e.source) && g.hasNode(e.target)) g.setEdge(e.source, e.target, {}, `e${i}`);
  });
  dagre.layout(g);
  const nodes: Node<NodeData>[] = shape.nodes.map((n) => {
    const p = g.node(n.id);
    const terminal = n.id === "__start__" || n.id === "__end__";
    const cut = n.id.lastIndexOf(":");
    const parent = cut > 0 ? n.id.slice(0, cut) : null;
    const root = n.id.split(":")[0];
    const isRunning = running.has(n.id) || running.has(root);
    return {
      id: n.id,
      position: { x: (p?.x ?? 0) - WIDTH / 2, y: (p?.y ?? 0) - HEIGHT / 2 },
      // the size the layout gave it: React Flow shows a node only once it knows a size, and a node
      // object made again (a new running node, a breakpoint) is otherwise hidden until measured again
      initialWidth: WIDTH,
      initialHeight: HEIGHT,
      data: {
        label: terminal ? n.id.replace(/__/g, "") : n.id.split(":").join(" › "),
        parent,
        running: isRunning,
        breakpoint: breakpoints.has(n.id),
        terminal,
      },
      type: "step",
      ariaLabel: `node ${n.id}${isRunning ? " (running)" : ""}${breakpoints.has(n.id) ? " (breakpoint)" : ""}`,
    };
  });
  const edges: Edge[] = shape.edges.map((e, i) => {
    const label = edgeLabel(e.data);
    return {
      id: `e${i}-${e.source}-${e.target}`,
      source: e.source,
      target: e.target,
      label: e.conditional ? label ?? "" : label,
      animated: running.has(e.source.split(":")[0]),
      className: e.conditional ? "edge-conditional" : "edge-plain",
      style: e.conditional ? { strokeDasharray: "6 4" } : undefined,
    };
  });
  return { nodes, edges };
}
