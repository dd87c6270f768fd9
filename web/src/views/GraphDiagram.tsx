// The diagram of a run's graph (React Flow, laid out by dagre): conditional edges dashed with their labels,
// the running node highlighted; a click on a node toggles a breakpoint on it (used by the debugger).
import { useEffect, useMemo, useState } from "react";
import {
  Background,
  Controls,
  Handle,
  Position,
  ReactFlow,
  useUpdateNodeInternals,
  type Node,
  type NodeProps,
} from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import { api } from "../api";
import { layoutGraph, type NodeData } from "../layout";
import { ErrorLine, useLoad } from "../ui";
import { useTheme } from "../theme";

function StepNode({ data }: NodeProps<Node<NodeData>>) {
  return (
    <div
      className={`gnode${data.parent ? " sub" : ""}${data.running ? " running" : ""}${data.breakpoint ? " has-bp" : ""}${data.terminal ? " terminal" : ""}`}
    >
      <Handle type="target" position={Position.Top} />
      {data.breakpoint && <span className="bp-dot" aria-hidden="true" />}
      {data.label}
      <Handle type="source" position={Position.Bottom} />
    </div>
  );
}

const nodeTypes = { step: StepNode };

/** Has React Flow measure the nodes' handles again whenever the node objects are made anew (the run's
 * timeline reloaded, a node started or a breakpoint set): their DOM keeps its size, so no resize is
 * observed, and without handle positions React Flow draws none of the edges. */
function Remeasure({ nodes }: { nodes: Node<NodeData>[] }) {
  const update = useUpdateNodeInternals();
  useEffect(() => {
    update(nodes.map((n) => n.id));
  }, [nodes, update]);
  return null;
}

export function GraphDiagram({
  graph,
  running,
  breakpoints,
  onToggleBreakpoint,
}: {
  graph: string;
  running: ReadonlySet<string>;
  breakpoints?: ReadonlySet<string>;
  onToggleBreakpoint?: (node: string) => void;
}) {
  const [expanded, setExpanded] = useState(false);
  const shape = useLoad(() => api.graph(graph, expanded), `graph:${graph}:${expanded}`);
  const hasSubgraphs = (shape.data?.nodes ?? []).some((n) => n.id.includes(":"));
  const { theme } = useTheme();
  // keyed by what the sets hold, not by the sets: a timeline reload makes an equal set anew
  const runningKey = [...running].sort().join("\n");
  const breakpointsKey = breakpoints ? [...breakpoints].sort().join("\n") : "";
  const { nodes, edges } = useMemo(
    () => (shape.data ? layoutGraph(shape.data, running, breakpoints) : { nodes: [], edges: [] }),
    // eslint-disable-next-line react-hooks/exhaustive-deps -- the keys stand for running and breakpoints
    [shape.data, runningKey, breakpointsKey],
  );
  return (
    <div className="graph-view" aria-label={`Graph ${graph}`}>
      <ErrorLine error={shape.error} />
      <div className="graph-tools">
        <button type="button" aria-pressed={expanded} onClick={() => setExpanded(!expanded)}>
          {expanded ? "Collapse subgraphs" : "Expand subgraphs"}
        </button>
        {expanded && shape.data && !shape.loading && !hasSubgraphs && <span className="muted">this graph has no subgraphs</span>}
      </div>
      <ReactFlow
        nodes={nodes}
        edges={edges}
        nodeTypes={nodeTypes}
        fitView
        colorMode={theme}
        nodesDraggable={false}
        nodesConnectable={false}
        onNodeClick={(_, n) => onToggleBreakpoint && !n.data.terminal && onToggleBreakpoint(n.id)}
        proOptions={{ hideAttribution: true }}
      >
        <Background />
        <Controls showInteractive={false} />
        <Remeasure nodes={nodes} />
      </ReactFlow>
      {onToggleBreakpoint && <p className="muted">Click a node to set or clear a breakpoint before it.</p>}
    </div>
  );
}
