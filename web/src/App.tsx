// The Studio shell: header (graphs, theme), routes: runs list at /ui, a run at /ui/runs/:runId, start at /ui/new.
import { BrowserRouter, Link, Navigate, Route, Routes } from "react-router-dom";
import { ThemeProvider, useTheme } from "./theme";
import { RunsList } from "./views/RunsList";
import { RunView } from "./views/RunView";
import { StartRun } from "./views/StartRun";

function Header() {
  const { theme, toggle } = useTheme();
  return (
    <header className="top">
      <Link to="/ui" className="brand">
        graphtape Studio
      </Link>
      <nav aria-label="main">
        <Link to="/ui">Runs</Link>
        <Link to="/ui/new">Start a run</Link>
      </nav>
      <button
        type="button"
        className="theme-toggle"
        aria-label={`Switch to ${theme === "dark" ? "light" : "dark"} theme`}
        onClick={toggle}
      >
        {theme === "dark" ? "☀ Light" : "☾ Dark"}
      </button>
    </header>
  );
}

export function App() {
  return (
    <ThemeProvider>
      <BrowserRouter>
        <Header />
        <main>
          <Routes>
            <Route path="/" element={<Navigate to="/ui" replace />} />
            <Route path="/ui" element={<RunsList />} />
            <Route path="/ui/new" element={<StartRun />} />
            <Route path="/ui/runs/:runId" element={<RunView />} />
            <Route path="*" element={<p>Nothing here. <Link to="/ui">Back to the runs</Link>.</p>} />
          </Routes>
        </main>
      </BrowserRouter>
    </ThemeProvider>
  );
}
