"""What the rest of the project shares (the scripts of leanrl/ only under --save-model): see the README's Layout."""
