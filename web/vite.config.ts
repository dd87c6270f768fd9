// Build the Studio UI into the Python package (src/graphtape/ui), served by graphtape dev at /ui-assets/.
// File names carry no hash so that a rebuild from the lock file gives the same bytes and a stable diff.
import { defineConfig } from "vitest/config";
import react from "@vitejs/plugin-react";

export default defineConfig({
  base: "/ui-assets/",
  plugins: [react()],
  build: {
    outDir: "../src/graphtape/ui",
    emptyOutDir: true,
    assetsDir: "",
    sourcemap: false,
    chunkSizeWarningLimit: 4000,
    rollupOptions: {
      output: {
        entryFileNames: "app.js",
        chunkFileNames: "[name].js",
        assetFileNames: "[name][extname]",
      },
    },
  },
  server: {
    proxy: Object.fromEntries(
      ["/graphtape", "/assistants", "/threads", "/runs", "/info", "/ok"].map((p) => [p, "http://127.0.0.1:2024"]),
    ),
  },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.ts", "src/**/*.test.tsx"],
  },
});
