// The JSON editor (CodeMirror 6), in its own chunk: loaded the first time an editor is shown.
import CodeMirror from "@uiw/react-codemirror";
import { json } from "@codemirror/lang-json";
import type { JsonEditorProps } from "./ui";
import { useTheme } from "./theme";

export default function CodeEditor({ value, onChange, readOnly = false, label, height = "280px" }: JsonEditorProps) {
  const { theme } = useTheme();
  return (
    <div className="editor" aria-label={label}>
      <CodeMirror
        value={value}
        height={height}
        theme={theme}
        readOnly={readOnly}
        editable={!readOnly}
        extensions={[json()]}
        onChange={onChange}
        basicSetup={{ foldGutter: true, lineNumbers: true }}
      />
    </div>
  );
}
