{ A Lazarus project that requires the package LazShoalMM (../../lazshoalmm.lpk)
  and does nothing else to get shoal: ShoalMM first in the uses clause. It
  exits 1 unless ShoalMM is the memory manager in force and every kind of
  block (GetMem, strings, objects, dynamic arrays, another thread's) is
  shoal's. pascal/tests/lazarus/run.sh builds it with lazbuild. }
program shoal_lazarus;

{$mode objfpc}{$H+}

uses
  ShoalMM, cthreads, SysUtils, Classes;

var
  failures: Integer = 0;

procedure Check(Condition: Boolean; const What: string);
begin
  if not Condition then
  begin
    WriteLn(StdErr, 'shoal_lazarus: FAIL ', What);
    Inc(failures);
  end;
end;

type
  TWorker = class(TThread)
  public
    Text: string;
    procedure Execute; override;
  end;

procedure TWorker.Execute;
begin
  Text := StringOfChar('w', 1000) + IntToStr(ThreadID);
end;

var
  manager: TMemoryManager;
  block: Pointer;
  text: string;
  list: TStringList;
  numbers: array of Integer;
  worker: TWorker;
begin
  Check(ShoalActive, 'ShoalActive is False: ShoalMM did not install itself');
  GetMemoryManager(manager);
  block := manager.GetMem(100);
  Check(ShoalOwns(block), 'the GetMem of the manager in force is not shoal''s');
  manager.FreeMem(block);
  block := GetMem(5000);
  Check(ShoalOwns(block), 'GetMem gives a block that is not shoal''s');
  FreeMem(block);
  text := StringOfChar('x', 200);
  Check(ShoalOwns(Pointer(text)), 'strings are not in shoal''s memory');
  list := TStringList.Create;
  list.Add(text);
  Check(ShoalOwns(Pointer(list)), 'objects are not in shoal''s memory');
  SetLength(numbers, 1000);
  Check(ShoalOwns(Pointer(numbers)), 'dynamic arrays are not in shoal''s memory');
  worker := TWorker.Create(False);
  worker.WaitFor;
  Check(ShoalOwns(Pointer(worker.Text)), 'a thread''s string is not in shoal''s memory');
  worker.Free;
  list.Free;
  Check(ShoalStats.LiveBlocks > 0, 'shoal''s statistics count no live block');
  if failures > 0 then
    Halt(1);
  WriteLn('shoal_lazarus: ShoalMM is the memory manager; ', ShoalStats.LiveBlocks,
    ' live blocks in shoal');
end.
