// The console's only script. An element with `data-live="<url>"` follows that server-sent event
// stream and takes, as its content, each fragment sent under its own id. The fragments are
// rendered and escaped by the server exactly like the pages; nothing here builds markup from data.
"use strict";
for (const region of document.querySelectorAll("[data-live]")) {
  const stream = new EventSource(region.dataset.live);
  stream.addEventListener(region.id, (event) => {
    region.innerHTML = event.data;
    region.dataset.updates = String(Number(region.dataset.updates || "0") + 1);
  });
  stream.addEventListener("signed-out", () => {
    stream.close();
    window.location.assign("/console/sign-in");
  });
}
